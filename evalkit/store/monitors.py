"""Monitors: checks of what a monitor scores with, deterministic sampling, and the rows of
``monitors`` and ``monitor_scores`` (statements in ``sql/monitors.sql``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from evalkit.db import Conn, IntegrityError
from evalkit.errors import BadRequest, Conflict, NotFound
from evalkit.model.names import check_name

# The built-in evaluators that need no expected answer, by their names in
# evalkit/scoring/builtins.py.
MONITOR_GAUGES: tuple[str, ...] = ("latency", "steps", "tokens", "cost", "tool_call_count")


def check_sample_rate(rate: float) -> float:
    if not 0.0 <= rate <= 1.0:
        raise BadRequest(
            f"sample rate {rate!r} is out of range: give a fraction from 0 to 1, e.g. "
            "--sample 0.5 to score half the sessions",
            code="bad-sample-rate",
        )
    return rate


def check_cap(cap: int | None) -> int | None:
    if cap is not None and cap <= 0:
        raise BadRequest(
            f"cap per hour {cap!r} must be a positive number of sessions; leave "
            "--cap-per-hour out for no cap",
            code="bad-cap",
        )
    return cap


def check_gauges(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in MONITOR_GAUGES]
    if unknown:
        raise BadRequest(
            f"unknown built-in evaluator {unknown[0]!r} for a monitor: a monitor scores "
            f"without an expected answer, so pick from {', '.join(MONITOR_GAUGES)}, a remote "
            "evaluator of the agent's workspace, or --rubric for a judge",
            code="unknown-evaluator",
        )
    return sorted(set(names))


def sampled(monitor_id: int, session_id: str, rate: float) -> bool:
    """Whether the monitor scores this session: a hash of both ids against the rate, so a
    backfill and a re-run pick the same sessions."""
    if rate >= 1.0:
        return True
    digest = hashlib.sha256(f"{monitor_id}:{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


async def insert(
    conn: Conn,
    *,
    workspace_id: int,
    workspace: str,
    name: str,
    agent_id: int,
    sample_rate: float,
    cap_per_hour: int | None,
    builtins: Sequence[str],
    evaluator_ids: Sequence[int],
    rubric: str | None,
    created_by: int | None,
) -> int:
    check_name("monitor name", name)
    if not builtins and not evaluator_ids and not rubric:
        raise BadRequest(
            f"monitor {name} has nothing to score with: give --rubric TEXT for a judge, or "
            f"--evaluator NAME ({', '.join(MONITOR_GAUGES)} or a remote evaluator)",
            code="monitor-no-evaluators",
        )
    try:
        row = await conn.one(
            "monitor_insert",
            workspace_id=workspace_id,
            name=name,
            agent_id=agent_id,
            sample_rate=check_sample_rate(sample_rate),
            cap_per_hour=check_cap(cap_per_hour),
            builtins=check_gauges(builtins),
            evaluator_ids=sorted(set(evaluator_ids)),
            rubric=rubric,
            created_by=created_by,
        )
    except IntegrityError as exc:
        if exc.constraint == "monitors_workspace_name_key":
            raise Conflict(
                f"monitor {name}@{workspace} exists already; pick another name, or change it "
                f"with `evalkit monitors update {name}@{workspace}`",
                code="monitor-exists",
            ) from None
        raise
    assert row is not None
    return int(row["id"])


async def list_monitors(
    conn: Conn, *, workspace_id: int | None = None, agent_id: int | None = None
) -> list[dict[str, Any]]:
    return await conn.all("monitor_list", workspace_id=workspace_id, agent_id=agent_id)


async def update(
    conn: Conn,
    monitor_id: int,
    *,
    sample_rate: float,
    cap_per_hour: int | None,
    builtins: Sequence[str],
    evaluator_ids: Sequence[int],
    rubric: str | None,
) -> int:
    """The monitor's version after the change (bumped only if something changed)."""
    row = await conn.one(
        "monitor_update",
        monitor_id=monitor_id,
        sample_rate=check_sample_rate(sample_rate),
        cap_per_hour=check_cap(cap_per_hour),
        builtins=check_gauges(builtins),
        evaluator_ids=sorted(set(evaluator_ids)),
        rubric=rubric,
    )
    if row is None:
        raise NotFound(f"monitor {monitor_id} does not exist", code="no-monitor")
    return int(row["version"])


async def delete(conn: Conn, monitor_id: int) -> None:
    if await conn.execute("monitor_delete", monitor_id=monitor_id) == 0:
        raise NotFound(f"monitor {monitor_id} does not exist", code="no-monitor")


async def get(conn: Conn, workspace_id: int, workspace: str, name: str) -> dict[str, Any]:
    row = await conn.one("monitor_get", monitor_id=None, workspace_id=workspace_id, name=name)
    if row is None:
        raise NotFound(
            f"monitor {name}@{workspace} does not exist; `evalkit monitors list --workspace "
            f"{workspace}` lists the workspace's monitors",
            code="no-monitor",
        )
    return row


async def get_by_id(conn: Conn, monitor_id: int) -> dict[str, Any] | None:
    return await conn.one("monitor_get", monitor_id=monitor_id, workspace_id=None, name=None)


async def all_ids(conn: Conn) -> list[int]:
    return [int(r["id"]) for r in await conn.all("monitor_ids")]


async def lock(conn: Conn, monitor_id: int) -> dict[str, Any] | None:
    """The monitor's row, locked until the transaction ends; None when it was deleted."""
    return await conn.one("monitor_lock", monitor_id=monitor_id)


async def candidates(
    conn: Conn,
    monitor: dict[str, Any],
    *,
    since: datetime,
    until: datetime,
    limit: int,
) -> list[dict[str, Any]]:
    return await conn.all(
        "monitor_candidates",
        monitor_id=monitor["id"],
        version=monitor["version"],
        agent_id=monitor["agent_id"],
        since=since,
        until=until,
        limit=limit,
    )


async def taken_last_hour(conn: Conn, monitor_id: int, version: int) -> int:
    row = await conn.one("monitor_taken_last_hour", monitor_id=monitor_id, version=version)
    return int(row["n"]) if row else 0


async def take(
    conn: Conn, monitor: dict[str, Any], session_ids: Sequence[str], *, backfill: bool = False
) -> list[str]:
    """The sessions newly taken for the monitor's version (those taken before are left)."""
    if not session_ids:
        return []
    rows = await conn.all(
        "monitor_take",
        monitor_id=monitor["id"],
        version=monitor["version"],
        agent_id=monitor["agent_id"],
        session_ids=list(session_ids),
        backfill=backfill,
    )
    return [r["session_id"] for r in rows]


async def advance(conn: Conn, monitor_id: int, *, until: datetime, capped: int) -> None:
    await conn.execute("monitor_advance", monitor_id=monitor_id, until=until, capped=capped)


async def session_for_scoring(
    conn: Conn, monitor_id: int, version: int, session_id: str
) -> dict[str, Any] | None:
    return await conn.one(
        "monitor_session_for_scoring",
        monitor_id=monitor_id,
        version=version,
        session_id=session_id,
    )


async def mark_scored(conn: Conn, monitor_id: int, version: int, session_id: str) -> None:
    await conn.execute(
        "monitor_session_scored", monitor_id=monitor_id, version=version, session_id=session_id
    )


async def record_score(
    conn: Conn,
    *,
    monitor_id: int,
    monitor_version: int,
    agent_id: int,
    session_id: str,
    score_name: str,
    value: float | None,
    passed: bool | None,
    comment: str | None,
    error: str | None,
    session_settled_at: datetime,
    kind: str = "evaluator",
    evaluator: str = "",
    prompt_hash: str | None = None,
    raw: float | None = None,
    skipped: str | None = None,
) -> bool:
    """True if this score was new; a repeat for the same monitor version is a no-op."""
    n = await conn.execute(
        "monitor_score_insert",
        monitor_id=monitor_id,
        monitor_version=monitor_version,
        agent_id=agent_id,
        session_id=session_id,
        score_name=score_name,
        kind=kind,
        evaluator=evaluator,
        prompt_hash=prompt_hash,
        value=value,
        raw=raw,
        passed=passed,
        comment=comment,
        error=error,
        skipped=skipped,
        session_settled_at=session_settled_at,
    )
    return n > 0


async def score_days(conn: Conn, monitor_id: int, since: datetime) -> list[dict[str, Any]]:
    return await conn.all("monitor_score_days", monitor_id=monitor_id, since=since)


async def progress(conn: Conn, monitor_id: int, since: datetime) -> dict[str, int]:
    row = await conn.one("monitor_progress", monitor_id=monitor_id, since=since)
    return {"taken": int(row["taken"]), "scored": int(row["scored"])} if row else {}


async def worst_sessions(
    conn: Conn,
    monitor_id: int,
    *,
    since: datetime,
    score: str | None = None,
    below: float | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    return await conn.all(
        "monitor_sessions_worst",
        monitor_id=monitor_id,
        since=since,
        score=score,
        below=below,
        limit=limit,
    )
