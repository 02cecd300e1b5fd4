"""Run transitions guarded and logged in the database: the machine's table of allowed steps
is the database's, a step outside it is refused whoever writes it, and every recorded step
leaves one event (who, from, to, why) that the API, the CLI and the run page show."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from evalkit.db import Database
from evalkit.harness.reference import Behaviour
from evalkit.model.runs import RunPosition, Transition
from evalkit.runs import engine as run_engine
from evalkit.runs import machine
from evalkit.store import runs as store
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.runs_helpers import (
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
    until,
    wait_finished,
    write_suite,
)


@pytest.fixture
def engine(database_url, tmp_path):
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def dev(engine, cli, tmp_path):
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    synced = cli("sync", str(write_suite(Repo(tmp_path / "repo"))), "--workspace", "dev")
    assert synced.code == 0, synced.err
    return token


def test_the_databases_allowed_steps_are_the_machines(database_url):
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT from_state, to_state FROM run_transitions_allowed").fetchall()
    in_database = {(a, b) for a, b in rows}
    in_machine = {(a, b) for a, targets in machine.ALLOWED.items() for b in targets}
    assert in_database == in_machine, (
        f"only in the database: {sorted(in_database - in_machine)}; "
        f"only in machine.ALLOWED: {sorted(in_machine - in_database)}; "
        "a migration must change run_transitions_allowed with the machine"
    )


def test_the_guard_refuses_a_step_the_machine_does_not_allow(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        done = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert done.code == 0, done.err
    run_id = done.json["run_list"][0]["id"]
    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute("UPDATE runs SET state = 'starting' WHERE id = %s", [run_id])
        assert refused.value.diag.constraint_name == "run_transition_allowed"
        assert f"run {run_id} cannot go from done to starting" in str(refused.value)
        # A change that leaves state and attempts alone is no step: the guard lets it be.
        conn.execute("UPDATE runs SET error = 'noted' WHERE id = %s", [run_id])
        state = conn.execute("SELECT state FROM runs WHERE id = %s", [run_id]).fetchone()
    assert state == ("done",)


def test_every_step_of_a_server_driven_run_is_logged(engine, dev, cli):
    with harness(Behaviour(run_seconds=0.2, fail_first={"status": 1})) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        done = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert done.code == 0, done.err
    run_id = done.json["run_list"][0]["id"]
    shown = api(engine, dev, "GET", f"/api/runs/{run_id}").json()
    events = shown["events"]
    steps = [(e["from_state"], e["to_state"]) for e in events]
    assert steps[0] == ("queued", "starting") and steps[-1] == ("scoring", "done"), steps
    assert ("collecting", "scoring") in steps
    # One chain: each step starts where the one before it ended.
    assert all(a[1] == b[0] for a, b in itertools.pairwise(steps)), steps
    assert {e["actor"] for e in events} == {"worker"}
    retried = [e for e in events if e["from_state"] == e["to_state"] and e["attempts"]]
    assert retried and "polling the run failed, retrying" in retried[0]["why"], events
    text = cli("runs", "show", str(run_id))
    assert text.code == 0, text.err
    assert "state changes:" in text.out and "queued -> starting by worker" in text.out
    with httpx.Client(base_url=engine.url, timeout=10) as browser:
        browser.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD, "next": "/"})
        page = browser.get(f"/runs/{run_id}")
    assert page.status_code == 200 and "State changes (" in page.text
    assert "took a free slot of the agent" in page.text


def test_a_replayed_step_records_nothing_and_logs_nothing(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        done = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
    run_id = done.json["run_list"][0]["id"]
    experiment_id = done.json["id"]

    async def replay() -> tuple[bool, int, int]:
        db = Database(engine.db_url)
        await db.open()
        try:
            async with db.connection() as conn:
                before = len(await store.run_events(conn, run_id))
                facts = (await store.experiment_row(conn, experiment_id)).facts
                stale = Transition(run_id=run_id, from_state="scoring", to_state="done")
                applied = await run_engine.record(conn, stale, facts, actor="worker")
                after = len(await store.run_events(conn, run_id))
        finally:
            await db.close()
        return applied, before, after

    applied, before, after = asyncio.run(replay())
    assert applied is False and before == after


def test_giving_up_on_a_run_is_a_logged_step_by_the_sweep(engine, dev, cli):
    with harness(Behaviour(run_seconds=30)) as ref:
        create_agent(engine, dev, "dev", "slow", ref.url)
        started = cli(
            "run", "finance@dev", "--agent", "slow@dev", "--case-id", "add", "--no-wait", "--json"
        )
        assert started.code == 0, started.err
        experiment_id = started.json["id"]

        async def give_up() -> None:
            db = Database(engine.db_url)
            await db.open()
            try:
                async with db.connection() as conn:
                    [live] = await store.live_runs(conn, experiment_id)
                    row = await store.experiment_row(conn, experiment_id)
                    facts = row.facts
                    await run_engine.give_up(conn, live["id"], "stuck for good", facts)
            finally:
                await db.close()

        asyncio.run(give_up())
        detail = wait_finished(engine, dev, experiment_id)
    assert detail["by_state"] == {"errored": 1}
    run_id = detail["run_list"][0]["id"]
    events = api(engine, dev, "GET", f"/api/runs/{run_id}").json()["events"]
    last = events[-1]
    assert last["to_state"] == "errored" and last["actor"] == "sweep"
    assert last["why"] == "stuck for good", last


def test_a_step_outside_the_machine_is_refused_before_the_database(database_url):
    with pytest.raises(ValueError, match="cannot go from done to running; done is final"):
        machine.transition(
            RunPosition(run_id=1, experiment_id=1, state="done", attempts=0), "running"
        )


def test_a_chain_of_steps_is_one_write_that_logs_each_step(engine, dev, cli):
    with harness(Behaviour(run_seconds=60)) as ref:
        experiment_id, run_id = _one_run_running(engine, dev, cli, ref)
        done_at = datetime(2026, 1, 2, tzinfo=UTC)
        at_collecting = Transition(
            run_id=run_id,
            from_state="running",
            to_state="collecting",
            harness_status="completed",
            error="first",
            harness_done_at=done_at,
        )
        at_scoring = Transition(
            run_id=run_id,
            from_state="collecting",
            to_state="scoring",
            error="second",
            harness_done_at=done_at + timedelta(hours=1),
        )
        out_of_order = Transition(run_id=run_id, from_state="running", to_state="collecting")

        async def chain() -> tuple[bool, bool]:
            db = Database(engine.db_url)
            await db.open()
            try:
                async with db.connection() as conn:
                    facts = (await store.experiment_row(conn, experiment_id)).facts
                    with pytest.raises(ValueError, match="a chain is of one run, in order"):
                        await run_engine.record_chain(
                            conn, [at_scoring, out_of_order], facts, actor="test"
                        )
                    chain = [at_collecting, at_scoring]
                    first = await run_engine.record_chain(conn, chain, facts, actor="test")
                    again = await run_engine.record_chain(conn, chain, facts, actor="test")
            finally:
                await db.close()
            return first, again

        first, again = asyncio.run(chain())
        with psycopg.connect(engine.db_url) as conn:
            row = conn.execute(
                "SELECT state, harness_status, error, harness_done_at FROM runs WHERE id = %s",
                [run_id],
            ).fetchone()
            logged = conn.execute(
                "SELECT from_state, to_state, actor, why FROM run_events"
                " WHERE run_id = %s AND actor = 'test' ORDER BY id",
                [run_id],
            ).fetchall()
    assert (first, again) == (True, False)
    # The last step's say wins, the first time given stays.
    assert row == ("scoring", "completed", "second", done_at)
    assert logged == [
        ("running", "collecting", "test", "first"),
        ("collecting", "scoring", "test", "second"),
    ]


def test_the_database_refuses_a_step_back_and_a_logged_jump(engine, dev, cli):
    with harness(Behaviour(run_seconds=60)) as ref:
        _, run_id = _one_run_running(engine, dev, cli, ref)
        with psycopg.connect(engine.db_url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.CheckViolation) as back:
                conn.execute("UPDATE runs SET state = 'queued' WHERE id = %s", [run_id])
            with pytest.raises(psycopg.errors.CheckViolation) as jump:
                conn.execute(
                    "INSERT INTO run_events (run_id, actor, from_state, to_state, attempts)"
                    " VALUES (%s, 'test', 'running', 'scoring', 0)",
                    [run_id],
                )
            state = conn.execute("SELECT state FROM runs WHERE id = %s", [run_id]).fetchone()
    assert back.value.diag.constraint_name == "run_transition_allowed"
    assert f"run {run_id} cannot go from running to queued" in str(back.value)
    assert jump.value.diag.constraint_name == "run_transition_allowed"
    assert f"run {run_id} cannot go from running to scoring" in str(jump.value)
    assert state == ("running",)


def _one_run_running(engine, dev, cli, ref) -> tuple[int, int]:
    """(experiment id, run id) of one run of the add case on the slow harness ``ref``, once
    the run is running there."""
    create_agent(engine, dev, "dev", "slow", ref.url)
    started = cli(
        "run", "finance@dev", "--agent", "slow@dev", "--case-id", "add", "--no-wait", "--json"
    )
    assert started.code == 0, started.err
    experiment_id = started.json["id"]
    running: list[int] = []
    with psycopg.connect(engine.db_url, autocommit=True) as conn:

        def is_running() -> bool:
            running[:] = (
                conn.execute(
                    "SELECT id FROM runs WHERE experiment_id = %s AND state = 'running'",
                    [experiment_id],
                ).fetchone()
                or []
            )
            return bool(running)

        until(is_running, what=f"the run of experiment {experiment_id} to be running")
    return experiment_id, running[0]
