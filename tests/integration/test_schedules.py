"""Schedules: created through the CLI and the API, fired by the tick function at a given
"now" (no waiting for the clock), their experiments run by the real worker against the
reference harness."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from evalkit.db import Database
from evalkit.http1 import Http1Client
from evalkit.jobs.queue import defer
from evalkit.jobs.schedules import Fire, tick
from evalkit.otel.mapping import load_starter
from evalkit.store import schedules as store
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, add_user, admin_api
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


def _engine(database_url, tmp_path, *, worker: bool):
    return engine_server(database_url, tmp_path, worker=worker)


@pytest.fixture
def engine(database_url, tmp_path):
    running = _engine(database_url, tmp_path, worker=True)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def edge(database_url, tmp_path):
    """The edge without a worker: experiments a tick starts stay queued."""
    running = _engine(database_url, tmp_path, worker=False)
    try:
        yield running
    finally:
        running.stop()


def _dev(server, cli, tmp_path) -> str:
    """@dev with the finance suite (3 cases) synced; the CLI logged in as admin."""
    token = login_token(server, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(server, token, "POST", "/api/workspaces", json={"name": "dev"})
    synced = cli("sync", str(write_suite(Repo(tmp_path / "repo"))), "--workspace", "dev")
    assert synced.code == 0, synced.err
    return token


async def _tick(server, now: datetime, ticks: int = 1) -> list[Fire]:
    """``ticks`` concurrent ticks, each with its own pool, as two workers would."""
    dbs = [Database(server.db_url, max_size=2) for _ in range(ticks)]
    http = Http1Client(server.settings.egress, timeout=15)
    try:
        for db in dbs:
            await db.open()
        rounds = await asyncio.gather(
            *(tick(db, now=now, settings=server.settings, http=http) for db in dbs)
        )
        return [fire for fires in rounds for fire in fires]
    finally:
        await http.aclose()
        for db in dbs:
            await db.close()


def fire_at(server, now: datetime, ticks: int = 1) -> list[Fire]:
    return asyncio.run(_tick(server, now, ticks))


def when(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_schedule_fires_and_its_experiment_runs_to_done(engine, cli, tmp_path):
    token = _dev(engine, cli, tmp_path)
    with harness() as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        created = cli(
            "schedules",
            "create",
            "finance@dev",
            "--agent",
            "ref@dev",
            "--cron",
            "0  3 * * *",
            "--name",
            "nightly",
            "--json",
        )
        assert created.code == 0, created.err
        sched = created.json
        assert sched["name"] == "nightly" and sched["workspace"] == "dev"
        assert sched["cron"] == "0 3 * * *"  # fields single-spaced
        assert sched["dataset"] == "finance@dev" and sched["agent"] == "ref@dev"
        assert sched["created_by"] == "admin" and sched["fires"] == 0
        assert sched["latest"] is None and sched["last_fire_at"] is None
        slot = when(sched["next_fire_at"])
        assert (slot.hour, slot.minute) == (3, 0) and slot > datetime.now(UTC)

        assert fire_at(engine, slot - timedelta(seconds=1)) == []  # not due yet
        [fire] = fire_at(engine, slot + timedelta(seconds=20))
        assert fire.slot == slot and fire.error is None and fire.experiment_id is not None
        assert fire_at(engine, slot + timedelta(seconds=40)) == []  # that slot is spent

        done = wait_finished(engine, token, fire.experiment_id)
        assert done["by_state"] == {"done": 3} and done["driver"] == "server"
        assert done["workspace"] == "dev" and done["created_by"] == "admin"
        assert ref.counters.runs_created == 3

        shown = cli("schedules", "show", "nightly@dev", "--json").json
        assert when(shown["last_fire_at"]) == slot and shown["fires"] == 1
        assert when(shown["next_fire_at"]) == slot + timedelta(days=1)
        assert shown["last_error"] is None
        latest = shown["latest"]
        assert latest["experiment_id"] == fire.experiment_id
        assert latest["status"] == "finished" and latest["runs"] == 3
        assert latest["by_state"] == {"done": 3}
        assert latest["summary"]["by_state"] == {"done": 3}

        text = cli("schedules", "show", str(sched["id"]))
        assert text.code == 0, text.err
        assert f"experiment {fire.experiment_id} finished: 3 done" in text.out
        assert "0 3 * * * (UTC)" in text.out and "ref@dev over finance@dev" in text.out
        listed = cli("schedules", "list")
        assert listed.code == 0 and "nightly@dev" in listed.out
        assert f"experiment {fire.experiment_id} finished: 3 done" in listed.out

        # Three days without a worker: the missed slots fire once, on the latest of them.
        later = slot + timedelta(days=3, hours=5)
        [caught_up] = fire_at(engine, later)
        assert caught_up.slot == slot + timedelta(days=3)
        assert wait_finished(engine, token, caught_up.experiment_id)["by_state"] == {"done": 3}
        again = cli("schedules", "show", "nightly@dev", "--json").json
        assert again["fires"] == 2 and again["latest"]["experiment_id"] == caught_up.experiment_id
        assert when(again["next_fire_at"]) == slot + timedelta(days=4)

        # The worker's own job, as its periodic trigger queues it, with the real clock.
        with psycopg.connect(engine.db_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE schedules SET last_fire_at = now() - interval '2 minutes', "
                "next_fire_at = now() - interval '1 minute' WHERE id = %s",
                (sched["id"],),
            )
        asyncio.run(_defer_tick(engine))
        earlier = (fire.experiment_id, caught_up.experiment_id)

        def fired_and_recorded() -> bool:
            # The slot is claimed (fires + 1) before the experiment starts and is recorded.
            shown = cli("schedules", "show", "nightly@dev", "--json").json
            latest = (shown["latest"] or {}).get("experiment_id")
            return shown["fires"] == 3 and (latest not in earlier or shown["last_error"])

        until(fired_and_recorded, what="the worker's fire_schedules job")
        third = cli("schedules", "show", "nightly@dev", "--json").json
        assert third["last_error"] is None
        assert third["latest"]["experiment_id"] not in (fire.experiment_id, caught_up.experiment_id)
        assert wait_finished(engine, token, third["latest"]["experiment_id"])["by_state"] == {
            "done": 3
        }
        assert ref.counters.runs_created == 9


async def _defer_tick(server) -> None:
    db = Database(server.db_url)
    await db.open()
    try:
        async with db.connection() as conn:
            await defer(conn, "fire_schedules", timestamp=0)
    finally:
        await db.close()


def test_two_concurrent_ticks_start_one_experiment(edge, cli, tmp_path):
    token = _dev(edge, cli, tmp_path)
    with harness() as ref:
        create_agent(edge, token, "dev", "ref", ref.url)
        slots = []
        for minute in range(3):
            created = cli(
                "schedules",
                "create",
                "finance@dev",
                "--agent",
                "ref@dev",
                "--cron",
                f"{minute} 4 * * *",
                "--name",
                f"s{minute}",
                "--json",
            )
            assert created.code == 0, created.err
            slots.append(when(created.json["next_fire_at"]))
        fires = fire_at(edge, max(slots) + timedelta(seconds=5), ticks=2)
        assert sorted(f.slot for f in fires) == sorted(slots)
        assert all(f.error is None for f in fires)
        experiments = api(edge, token, "GET", "/api/experiments").json()
        assert len(experiments) == 3
        assert {e["id"] for e in experiments} == {f.experiment_id for f in fires}

    async def claim_twice() -> list[bool]:
        db = Database(edge.db_url)
        await db.open()
        try:
            async with db.connection() as conn:
                due = (await store.due_schedules(conn, datetime(2100, 1, 1, tzinfo=UTC)))[0]
                slot = store.latest_slot(due.cron, datetime(2100, 1, 1, tzinfo=UTC))
                nxt = store.next_slot(due.cron, slot)
                return [
                    await store.claim_slot(
                        conn, due.id, due=due.next_fire_at, slot=slot, next_fire_at=nxt
                    )
                    for _ in range(2)
                ]
        finally:
            await db.close()

    # The compare-and-set alone: the second claim of the same due time gets nothing.
    assert asyncio.run(claim_twice()) == [True, False]


def test_refusals_at_create(edge, cli, tmp_path):
    token = _dev(edge, cli, tmp_path)
    create_agent(edge, token, "dev", "ref", "http://127.0.0.1:9")

    def create(*extra: str, cron: str = "0 * * * *", agent: str = "ref@dev"):
        return cli("schedules", "create", "finance@dev", "--agent", agent, "--cron", cron, *extra)

    four = create(cron="0 * * *")
    assert four.code == 1
    assert "cron expression '0 * * *' has 4 fields" in four.err
    assert "five fields, minute hour day-of-month month day-of-week" in four.err
    assert "[bad-cron]" in four.err
    for bad in ("61 * * * *", "0 0 31 2 *", "@hourly", "0 0 * * * *"):
        refused = create(cron=bad)
        assert refused.code == 1 and f"cron expression {bad!r}" in refused.err, refused.err
        assert "[bad-cron]" in refused.err

    # a code-driven agent is run by the SDK, not by the server
    admin_api(
        edge,
        token,
        "POST",
        "/api/workspaces/dev/agents",
        json={"name": "traced", "mapping": load_starter("openinference")},
    )
    coded = create(agent="traced@dev")
    assert coded.code == 1 and "[code-driven-agent]" in coded.err
    assert "agent traced@dev has no harness URL" in coded.err
    assert "evalkit.sdk.run_experiment" in coded.err

    missing = cli("schedules", "create", "nope@dev", "--agent", "ref@dev", "--cron", "0 * * * *")
    assert missing.code == 1 and "no dataset" in missing.err.lower()
    assert create(agent="ghost@dev").code == 1
    split = create("--split", "train")
    assert split.code == 1 and "no cases to run in split 'train'" in split.err
    unknown_case = create("--case-id", "nope")
    assert unknown_case.code == 1 and "no case 'nope'" in unknown_case.err

    # a reader of @dev (a reviewer) reads schedules but neither creates nor deletes them
    first = create("--name", "hourly", "--json")
    assert first.code == 0, first.err
    dup = create("--name", "hourly")
    assert dup.code == 1 and "schedule hourly@dev exists already" in dup.err
    rita = add_user(edge, token, "rita", member_of="dev", role="reviewer")
    refused = cli(
        "schedules",
        "create",
        "finance@dev",
        "--agent",
        "ref@dev",
        "--cron",
        "0 * * * *",
        token=rita,
    )
    assert refused.code == 1 and "[shared-writers-write]" in refused.err
    assert "rita is not a writer of @dev and cannot create schedules in it" in refused.err
    r = api(
        edge,
        rita,
        "POST",
        "/api/schedules",
        json={"dataset": "finance@dev", "agent": "ref@dev", "cron": "0 * * * *"},
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "shared-writers-write"
    assert cli("schedules", "list", "--json", token=rita).json[0]["name"] == "hourly"
    assert cli("schedules", "show", "hourly@dev", "--json", token=rita).code == 0
    gone = cli("schedules", "delete", "hourly@dev", token=rita)
    assert gone.code == 1 and "[shared-writers-write]" in gone.err
    assert "cannot delete its schedules" in gone.err

    # a personal harness agent is driven by its owner's CLI, never by the server
    alice = add_user(edge, token, "alice", member_of="dev")
    api(
        edge,
        alice,
        "POST",
        "/api/workspaces/alice/agents",
        json={"name": "mine", "harness_url": "http://127.0.0.1:9"},
    ).raise_for_status()
    personal = cli(
        "schedules", "create", "finance@dev", "--agent", "mine", "--cron", "0 * * * *", token=alice
    )
    assert personal.code == 1 and "[server-cannot-drive-personal-agent]" in personal.err
    others = cli(
        "schedules",
        "create",
        "finance@dev",
        "--agent",
        "mine@alice",
        "--cron",
        "0 * * * *",
        token=token,
    )
    assert others.code == 1 and "[personal-agent-owner-only]" in others.err

    # unknown fields and bad repetitions are refused by the wire struct
    r = api(
        edge,
        token,
        "POST",
        "/api/schedules",
        json={"dataset": "finance@dev", "agent": "ref@dev", "cron": "0 * * * *", "every": "day"},
    )
    assert r.status_code == 400 and "unknown field `every`" in r.json()["error"]["message"]
    assert [s["name"] for s in api(edge, token, "GET", "/api/schedules").json()] == ["hourly"]


def test_fires_refused_later_are_kept_on_the_schedule(edge, cli, tmp_path):
    token = _dev(edge, cli, tmp_path)
    with harness() as ref:
        create_agent(edge, token, "dev", "ref", ref.url)
        wendy = add_user(edge, token, "wendy", member_of="dev")
        mine = cli(
            "schedules",
            "create",
            "finance@dev",
            "--agent",
            "ref@dev",
            "--cron",
            "*/5 * * * *",
            "--name",
            "wendys",
            "--json",
            token=wendy,
        )
        assert mine.code == 0, mine.err
        slot = when(mine.json["next_fire_at"])
        [ok] = fire_at(edge, slot)
        assert ok.error is None and ok.experiment_id is not None
        started = api(edge, token, "GET", f"/api/experiments/{ok.experiment_id}").json()
        assert started["created_by"] == "wendy"

        # wendy is no writer of @dev any more: her schedule's next fire is refused as her
        admin_api(edge, token, "DELETE", "/api/workspaces/dev/members/wendy")
        [refused] = fire_at(edge, slot + timedelta(minutes=5))
        assert refused.experiment_id is None
        assert "[shared-writers-write]" in refused.error and "wendy" in refused.error
        shown = cli("schedules", "show", "wendys@dev", "--json", token=token).json
        assert shown["last_error"] == refused.error and shown["fires"] == 2
        assert shown["latest"]["experiment_id"] == ok.experiment_id  # the last one started
        text = cli("schedules", "list", token=token).out
        assert "last fire refused: wendy is not a writer of @dev" in text
        assert f"experiment {ok.experiment_id} running" in text  # no worker here

        # disabled, she starts nothing at all
        admin_api(edge, token, "POST", "/api/users/wendy/disable")
        [disabled] = fire_at(edge, slot + timedelta(minutes=10))
        assert "[schedule-fires-as-creator]" in disabled.error
        assert "created by wendy, who is disabled" in disabled.error

        # enabled and a writer again, her schedule starts experiments as her again
        admin_api(edge, token, "POST", "/api/users/wendy/enable")
        admin_api(
            edge,
            token,
            "POST",
            "/api/workspaces/dev/members",
            json={"username": "wendy", "role": "writer"},
        )
        [again] = fire_at(edge, slot + timedelta(minutes=15))
        assert again.error is None and again.experiment_id is not None
        restarted = api(edge, token, "GET", f"/api/experiments/{again.experiment_id}").json()
        assert restarted["created_by"] == "wendy"

    # the harness is down: the fire is refused saying so, and starts nothing
    admin = cli(
        "schedules",
        "create",
        "finance@dev",
        "--agent",
        "ref@dev",
        "--cron",
        "0 5 * * *",
        "--name",
        "admins",
        "--json",
        token=token,
    ).json
    fires = fire_at(edge, when(admin["next_fire_at"]))
    [down] = [f for f in fires if f.schedule_id == admin["id"]]
    assert "[harness-unreachable]" in down.error
    assert "evalkit harness check ref@dev" in down.error
    assert len(api(edge, token, "GET", "/api/experiments").json()) == 2


def test_list_show_delete(edge, cli, tmp_path):
    token = _dev(edge, cli, tmp_path)
    create_agent(edge, token, "dev", "ref", "http://127.0.0.1:9")
    admin_api(edge, token, "POST", "/api/workspaces", json={"name": "prod"})
    created = cli(
        "schedules",
        "create",
        "finance@dev",
        "--agent",
        "ref@dev",
        "--cron",
        "30 2 * * 1-5",
        "--split",
        "test",
        "--case-id",
        "add",
        "--repetitions",
        "2",
        "--model",
        "m1",
    )
    assert created.code == 0, created.err
    assert "created schedule finance-ref@dev (id 1)" in created.out
    assert "at '30 2 * * 1-5' UTC; first run" in created.out
    shown = cli("schedules", "show", "finance-ref@dev")
    assert "(split test; cases add; 2 repetitions; model m1)" in shown.out
    assert (
        "last fire:  never (0 so far)" in shown.out and "latest:     no experiment yet" in shown.out
    )
    as_json = cli("schedules", "show", "1", "--json").json
    assert as_json["case_ids"] == ["add"] and as_json["repetitions"] == 2
    assert as_json["split"] == "test" and as_json["model"] == "m1"

    assert cli("schedules", "list", "--workspace", "prod", "--json").json == []
    assert [s["id"] for s in cli("schedules", "list", "--workspace", "dev", "--json").json] == [1]
    assert "(none)" in cli("schedules", "list", "--workspace", "prod").out
    missing = cli("schedules", "show", "nope@dev")
    assert missing.code == 1 and "no schedule nope@dev" in missing.err
    assert cli("schedules", "show", "999").code == 1

    second = cli(
        "schedules",
        "create",
        "finance@dev",
        "--agent",
        "ref@dev",
        "--cron",
        "0 * * * *",
        "--name",
        "hourly",
        "--json",
    ).json
    deleted = cli("schedules", "delete", "finance-ref@dev", "--json")
    assert deleted.code == 0 and deleted.json == {
        "id": 1,
        "name": "finance-ref",
        "workspace": "dev",
    }
    by_id = cli("schedules", "delete", str(second["id"]))
    assert (
        by_id.code == 0 and by_id.out.strip() == f"deleted schedule hourly@dev (id {second['id']})"
    )
    assert cli("schedules", "list", "--json").json == []
    assert cli("schedules", "delete", "1").code == 1

    helped = cli("schedules", "create", "--help")
    assert helped.code == 0 and "five cron fields" in helped.out and "UTC" in helped.out
