"""The worker's runs that reach scoring together share one transaction (evalkit.jobs.batch),
and a run the database refuses fails only its own job: the batch is written again run by
run, and the other runs end as if they had been alone."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from evalkit.config import Settings
from evalkit.db import Database, ValueRefused
from evalkit.jobs import runs as jobs
from evalkit.jobs import runtime
from evalkit.model.runs import Transition
from evalkit.store import runs as store
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.runs_helpers import (
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
    write_suite,
)

CASES = {f"c{n}": (f"What is {n} + 1?", str(n + 1)) for n in range(3)}


@pytest.fixture
def started(database_url, tmp_path: Path, cli):
    """(database url, experiment id, run ids): an experiment of 3 runs, all claimed
    (starting), on a server with no worker, so only the test moves them."""
    server = engine_server(database_url, tmp_path, worker=False)
    try:
        token = login_token(server, "admin", ADMIN_PASSWORD)
        cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
        cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
        admin_api(server, token, "POST", "/api/workspaces", json={"name": "dev"})
        suite = write_suite(Repo(tmp_path / "repo"), cases=CASES)
        assert cli("sync", str(suite), "--workspace", "dev").code == 0
        with harness() as ref:
            create_agent(server, token, "dev", "ref", ref.url, max_concurrent_runs=3)
            created = api(
                server,
                token,
                "POST",
                "/api/experiments",
                json={"dataset": "finance@dev", "agent": "ref@dev"},
            )
            assert created.status_code == 201, created.text
        experiment_id = created.json()["id"]
        with psycopg.connect(database_url, autocommit=True) as conn:
            [agent_id] = conn.execute("SELECT id FROM agents WHERE name = 'ref'").fetchone()
            claimed = conn.execute(
                "SELECT id FROM evalkit_claim_runs(%s, 10, 'test') AS id", (agent_id,)
            ).fetchall()
        yield database_url, experiment_id, sorted(run_id for (run_id,) in claimed)
    finally:
        server.stop()


def _to_scoring(run_id: int, answer: str) -> list[Transition]:
    """What the worker holds for a run the harness finished at once, without a trajectory."""
    at = datetime.now(UTC)
    return [
        Transition(
            run_id=run_id,
            from_state="starting",
            to_state="collecting",
            harness_run_id=f"h-{run_id}",
            harness_status="completed",
            answer=answer,
            started_at=at,
            harness_done_at=at,
        ),
        Transition(run_id=run_id, from_state="collecting", to_state="scoring"),
    ]


def test_a_run_the_database_refuses_fails_only_its_own_job(started, caplog):
    url, experiment_id, run_ids = started
    good, poisoned, other = run_ids

    async def finish_together() -> list[object]:
        db = Database(url)
        await db.open()
        runtime.install(db, Settings())
        try:
            async with db.connection() as conn:
                facts = (await store.experiment_row(conn, experiment_id)).facts
            answers = {good: "1", poisoned: "a NUL \x00 here", other: "3"}
            every = asyncio.gather(
                *(jobs._record(db, _to_scoring(r, answers[r]), facts) for r in run_ids),
                return_exceptions=True,
            )
            # A caller the batch forgot would wait for ever: the bound makes that a failure.
            return await asyncio.wait_for(every, timeout=30)
        finally:
            await db.close()

    with caplog.at_level(logging.WARNING, logger="evalkit.jobs"):
        results = asyncio.run(finish_together())
    assert "a batch of 3 failed" in caplog.text, caplog.text  # they did share a transaction
    by_run = dict(zip(run_ids, results, strict=True))
    assert isinstance(by_run[poisoned], ValueRefused), by_run[poisoned]
    assert "NUL character" in str(by_run[poisoned])
    for run_id in (good, other):
        steps = by_run[run_id]
        assert isinstance(steps, list), steps
        assert [t.to_state for t in steps] == ["collecting", "scoring", "done"]
    with psycopg.connect(url) as conn:
        states = dict(
            conn.execute("SELECT id, state FROM runs WHERE id = ANY(%s)", [run_ids]).fetchall()
        )
        logged = conn.execute(
            "SELECT count(*) FROM run_events WHERE run_id = %s", [poisoned]
        ).fetchone()
    assert states == {good: "done", poisoned: "starting", other: "done"}
    assert logged == (1,)  # only its claim: nothing of the refused write was kept
