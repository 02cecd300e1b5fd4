"""Claims of an agent's queued runs count each other: the agent row lock is taken inside
the claim's statement (evalkit/sql/schema/0018_claim_in_one_statement.sql), and the claim
that waited on it sees the runs the one before it claimed."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.runs_helpers import (
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
    until,
    write_suite,
)

CLAIM = "SELECT id FROM evalkit_claim_runs(%s, 10, 'test') AS id"
CASES = {f"c{n}": (f"What is {n} + 1?", str(n + 1)) for n in range(6)}


@pytest.fixture
def queued(database_url, tmp_path: Path, cli):
    """(database url, agent id): an experiment of 6 runs of an agent allowed 2 at a time,
    2 of them claimed, on a server with no worker, so nothing moves a run on."""
    server = engine_server(database_url, tmp_path, worker=False)
    try:
        token = login_token(server, "admin", ADMIN_PASSWORD)
        cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
        cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
        admin_api(server, token, "POST", "/api/workspaces", json={"name": "dev"})
        synced = cli(
            "sync", str(write_suite(Repo(tmp_path / "repo"), cases=CASES)), "--workspace", "dev"
        )
        assert synced.code == 0, synced.err
        with harness() as ref:
            create_agent(server, token, "dev", "ref", ref.url, max_concurrent_runs=2)
            started = api(
                server,
                token,
                "POST",
                "/api/experiments",
                json={"dataset": "finance@dev", "agent": "ref@dev"},
            )
            assert started.status_code == 201, started.text
            with psycopg.connect(database_url) as conn:
                [agent_id] = conn.execute("SELECT id FROM agents WHERE name = 'ref'").fetchone()
                assert len(conn.execute(CLAIM, (agent_id,)).fetchall()) == 2
            yield database_url, agent_id
    finally:
        server.stop()


def _states(url: str, agent_id: int) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT state, count(*) FROM runs WHERE agent_id = %s GROUP BY state", (agent_id,)
        ).fetchall()
    return dict(rows)


def test_a_claim_waiting_on_another_counts_what_that_one_claimed(queued):
    url, agent_id = queued
    assert _states(url, agent_id) == {"starting": 2, "queued": 4}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE agents SET max_concurrent_runs = 4 WHERE id = %s", (agent_id,))

    first = psycopg.connect(url)  # a transaction held open until the test commits it
    first_claimed = first.execute(CLAIM, (agent_id,)).fetchall()
    assert len(first_claimed) == 2  # up to the new limit of 4

    second: list[tuple[int]] = []

    def claim_again() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            second.extend(conn.execute(CLAIM, (agent_id,)).fetchall())

    waiting = threading.Thread(target=claim_again)
    waiting.start()
    with psycopg.connect(url, autocommit=True) as watcher:
        until(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND query LIKE '%%evalkit_claim_runs%%'"
                ).fetchone()[0]
                == 1
            ),
            what="the second claim waiting on the first's lock",
        )
    first.commit()
    first.close()
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    # A claim whose snapshot predated the first one's commit would take 2 more.
    assert second == []
    assert _states(url, agent_id) == {"starting": 4, "queued": 2}


def test_a_claim_never_takes_past_the_limit(queued):
    url, agent_id = queued
    with psycopg.connect(url, autocommit=True) as conn:
        claimed = conn.execute(CLAIM, (agent_id,)).fetchall()
        logged = conn.execute(
            "SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id "
            "WHERE r.agent_id = %s AND e.to_state = 'starting'",
            (agent_id,),
        ).fetchone()[0]
    assert claimed == []
    assert _states(url, agent_id) == {"starting": 2, "queued": 4}
    assert logged == 2  # each claimed run's step is logged once
