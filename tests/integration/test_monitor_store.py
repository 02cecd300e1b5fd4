"""Every statement of sql/monitors.sql through store/monitors.py, on a real migrated
PostgreSQL: create, update (version bumps only on a real change), record_score once per
version, the hourly cap count, the worst-sessions query, and delete."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from evalkit.db import Database
from evalkit.errors import Conflict, NotFound
from evalkit.store import monitors


async def _setup(conn):
    user = await conn.one(
        "user_insert", username="mona", password_hash="x", is_admin=False, oidc_subject=None
    )
    ws = await conn.one("workspace_insert", name="team", kind="shared", owner_id=None)
    agent = await conn.one(
        "agent_insert",
        workspace_id=ws["id"],
        name="bot",
        harness_url=None,
        api_key_env=None,
        trajectory_source="otel",
        max_concurrent_runs=1,
        run_timeout=60,
        poll_interval=1,
        stop_grace=1,
        trajectory_wait=1,
        provides="[]",
        actor_id=user["id"],
    )
    sessions = [f"s{i}" for i in range(4)]
    await conn.all("session_lock_many", agent_id=agent["id"], session_ids=json.dumps(sessions))
    return user["id"], ws["id"], agent["id"], sessions


async def test_monitor_statements(database_url):
    db = Database(database_url)
    await db.open()
    try:
        async with db.connection() as conn:
            user_id, ws_id, agent_id, _sessions = await _setup(conn)
            common = dict(
                workspace_id=ws_id,
                workspace="team",
                agent_id=agent_id,
                sample_rate=0.5,
                cap_per_hour=10,
                builtins=["latency", "tokens"],
                evaluator_ids=[],
                rubric="Is it helpful?",
                created_by=user_id,
            )
            mid = await monitors.insert(conn, name="helpful", **common)
            with pytest.raises(Conflict) as exc:
                await monitors.insert(conn, name="helpful", **common)
            assert "exists already" in exc.value.message

            [row] = await monitors.list_monitors(conn, workspace_id=ws_id)
            assert (row["name"], row["agent"], row["workspace"], row["version"]) == (
                "helpful",
                "bot",
                "team",
                1,
            )
            assert row["builtins"] == ["latency", "tokens"]
            assert await monitors.list_monitors(conn, agent_id=agent_id) == [row]

            same = dict(
                sample_rate=0.5,
                cap_per_hour=10,
                builtins=["tokens", "latency"],
                evaluator_ids=[],
                rubric="Is it helpful?",
            )
            assert await monitors.update(conn, mid, **same) == 1
            assert await monitors.update(conn, mid, **{**same, "sample_rate": 0.25}) == 2
            assert await monitors.update(conn, mid, **{**same, "sample_rate": 0.25}) == 2
            assert await monitors.update(conn, mid, **{**same, "cap_per_hour": None}) == 3
            with pytest.raises(NotFound):
                await monitors.update(conn, mid + 999, **same)

            settled = datetime.now(UTC) - timedelta(minutes=5)
            values = {"s0": 0.9, "s1": 0.1, "s2": 0.5, "s3": None}
            for s, v in values.items():
                score = dict(
                    monitor_id=mid,
                    monitor_version=3,
                    agent_id=agent_id,
                    session_id=s,
                    score_name="helpfulness",
                    value=v,
                    passed=None if v is None else v >= 0.5,
                    comment=None,
                    error="judge unreachable" if v is None else None,
                    session_settled_at=settled,
                )
                assert await monitors.record_score(conn, **score) is True
                assert await monitors.record_score(conn, **score) is False
            assert await monitors.record_score(
                conn,
                **{**score, "score_name": "latency", "value": None, "error": None},
                kind="gauge",
                raw=2.0,
            )
            monitor = await monitors.get_by_id(conn, mid)
            assert monitor["version"] == 3 and monitor["evaluators"] == []
            assert await monitors.take(conn, monitor, ["s0", "s1"]) == ["s0", "s1"]
            assert await monitors.take(conn, monitor, ["s1", "s2"]) == ["s2"]
            assert await monitors.take(conn, monitor, ["s3"], backfill=True) == ["s3"]
            # the cap counts what the sweep took, not a backfill's sessions
            assert await monitors.taken_last_hour(conn, mid, 3) == 3
            assert await monitors.taken_last_hour(conn, mid, 2) == 0
            taken = await monitors.session_for_scoring(conn, mid, 3, "s1")
            assert taken["scored_at"] is None and taken["stored"] == [""]
            await monitors.mark_scored(conn, mid, 3, "s1")
            assert (await monitors.session_for_scoring(conn, mid, 3, "s1"))["scored_at"]
            assert await monitors.progress(conn, mid, datetime.now(UTC) - timedelta(hours=1)) == {
                "taken": 4,
                "scored": 1,
            }

            since = datetime.now(UTC) - timedelta(hours=1)
            worst = await monitors.worst_sessions(conn, mid, since=since, score="helpfulness")
            assert [w["session_id"] for w in worst] == ["s1", "s2", "s0", "s3"]
            assert worst[0]["scores"] == {"helpfulness": 0.1}
            assert worst[-1]["scores"] == {"helpfulness": None, "latency": 2.0}
            assert worst[0]["agent"] == "bot" and worst[0]["agent_workspace"] == "team"
            below = await monitors.worst_sessions(
                conn, mid, since=since, score="helpfulness", below=0.6
            )
            assert [w["session_id"] for w in below] == ["s1", "s2"]
            limited = await monitors.worst_sessions(conn, mid, since=since, limit=1)
            assert [w["session_id"] for w in limited] == ["s1"]
            later = await monitors.worst_sessions(
                conn, mid, since=datetime.now(UTC) + timedelta(hours=1)
            )
            assert later == []

            await monitors.delete(conn, mid)
            assert await monitors.list_monitors(conn) == []
            with pytest.raises(NotFound):
                await monitors.delete(conn, mid)
    finally:
        await db.close()
