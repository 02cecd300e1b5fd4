"""Telling a dead worker from a slow one (:mod:`evalkit.jobs.liveness`), on the real
PostgreSQL: a worker that holds its liveness lock keeps its jobs however long it is silent;
one whose lock is gone is dead three seconds after its last heartbeat; a broken liveness
session is replaced; procrastinate's own worker holds the lock before its first job."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import procrastinate
import pytest

from evalkit.jobs import liveness, procrastinate_adapter
from evalkit.jobs.app import connected
from evalkit.jobs.liveness import Liveness, LivenessLost
from evalkit.jobs.maintenance import take_back_abandoned_jobs
from tests.integration.db_helpers import sql

STALLED = 60.0


@pytest.fixture
async def jobs(database_url: str) -> AsyncIterator[procrastinate.App]:
    """evalkit's app, open on the test's database (the sweep queues its next retry there)."""
    async with connected(database_url, max_size=3) as app:
        yield app


def register_worker(database_url: str, silent_for: float = 0) -> int:
    [(worker_id,)] = sql(
        database_url,
        "INSERT INTO procrastinate_workers (last_heartbeat) "
        "VALUES (now() - make_interval(secs => %s)) RETURNING id",
        (silent_for,),
    )
    assert isinstance(worker_id, int)
    return worker_id


def silence(database_url: str, worker_id: int, seconds: float) -> None:
    sql(
        database_url,
        "UPDATE procrastinate_workers SET last_heartbeat = now() - make_interval(secs => %s) "
        "WHERE id = %s",
        (seconds, worker_id),
    )


def running_job(database_url: str, worker_id: int | None) -> int:
    [(job_id,)] = sql(
        database_url,
        "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, worker_id) "
        "VALUES ('default', 'advance_run', %s, 'doing', %s) RETURNING id",
        (json.dumps({"run_id": 1}), worker_id),
    )
    assert isinstance(job_id, int)
    return job_id


def job_status(database_url: str, job_id: int) -> str:
    [(status,)] = sql(
        database_url, "SELECT status::text FROM procrastinate_jobs WHERE id = %s", (job_id,)
    )
    return str(status)


def registered(database_url: str) -> list[int]:
    return [
        int(row[0]) for row in sql(database_url, "SELECT id FROM procrastinate_workers ORDER BY id")
    ]  # type: ignore[call-overload]


def later_retries(database_url: str) -> list[float]:
    """Seconds until each waiting retry of stalled jobs."""
    rows = sql(
        database_url,
        "SELECT extract(epoch FROM coalesce(scheduled_at, now()) - now())::float8 "
        "FROM procrastinate_jobs WHERE task_name = 'retry_stalled_jobs' AND status = 'todo'",
    )
    return [float(row[0]) for row in rows]  # type: ignore[arg-type]


def lock_holders(database_url: str, worker_id: int) -> list[int]:
    """Backend pids holding the worker's liveness lock."""
    rows = sql(
        database_url,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (liveness.LOCK_NAMESPACE, worker_id),
    )
    return [int(row[0]) for row in rows]  # type: ignore[call-overload]


async def test_a_worker_holding_its_lock_keeps_its_jobs_however_long_it_is_silent(
    jobs, db, database_url
):
    """A slow worker (here: silent for an hour, as one whose event loop is blocked) is never
    taken as dead while its session holds its lock; the moment the session ends, as a
    killed process's does, it is."""
    worker_id = register_worker(database_url)
    job_id = running_job(database_url, worker_id)
    session = Liveness(database_url, lost_after=STALLED)
    await session.open()
    await session.hold(worker_id)
    silence(database_url, worker_id, 3600)

    assert await take_back_abandoned_jobs(jobs, db, STALLED) == 0
    assert job_status(database_url, job_id) == "doing"
    assert registered(database_url) == [worker_id]
    async with db.connection() as conn:
        [seen] = await liveness.workers(conn)
    assert seen.locked and seen.stuck(STALLED) and not seen.dead, seen

    await session.close()
    await released(database_url, worker_id)
    assert await take_back_abandoned_jobs(jobs, db, STALLED) == 1
    assert job_status(database_url, job_id) == "todo"
    assert registered(database_url) == []


async def released(database_url: str, worker_id: int) -> None:
    """Wait for the server to end the closed session: its backend drops the lock as it exits,
    a moment after the client has hung up."""
    for _ in range(100):
        if not lock_holders(database_url, worker_id):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"worker {worker_id}'s liveness lock outlived its closed session")


async def test_a_worker_without_its_lock_is_dead_three_seconds_after_its_last_heartbeat(
    jobs, db, database_url
):
    """Killed a moment ago: not dead yet (a live worker whose session broke would take its
    lock again meanwhile), so the sweep queues one more retry for when it will be."""
    worker_id = register_worker(database_url, silent_for=1.0)
    job_id = running_job(database_url, worker_id)

    assert await take_back_abandoned_jobs(jobs, db, STALLED) == 0
    assert job_status(database_url, job_id) == "doing"
    [wait] = later_retries(database_url)
    expected = liveness.SILENT_SECONDS - 1.0
    assert expected - 0.5 < wait <= expected + 1.0, wait

    silence(database_url, worker_id, liveness.SILENT_SECONDS + 0.1)
    assert await take_back_abandoned_jobs(jobs, db, STALLED) == 1
    assert job_status(database_url, job_id) == "todo"
    assert registered(database_url) == []


async def test_jobs_whose_worker_was_removed_are_taken_back_and_live_workers_are_not_touched(
    jobs, db, database_url
):
    orphan = running_job(database_url, None)
    alive = register_worker(database_url)
    session = Liveness(database_url, lost_after=STALLED)
    await session.open()
    try:
        await session.hold(alive)
        kept = running_job(database_url, alive)
        assert await take_back_abandoned_jobs(jobs, db, STALLED) == 1
        assert (job_status(database_url, orphan), job_status(database_url, kept)) == (
            "todo",
            "doing",
        )
        assert registered(database_url) == [alive]
        assert later_retries(database_url) == []  # nothing is dying
    finally:
        await session.close()


async def test_a_broken_liveness_session_is_replaced_and_the_lock_taken_again(database_url):
    worker_id = register_worker(database_url)
    session = Liveness(database_url, lost_after=1.0)  # polls every 0.5 s
    await session.open()
    await session.hold(worker_id)
    keeper = asyncio.create_task(session.keep())
    try:
        [first] = lock_holders(database_url, worker_id)
        sql(database_url, "SELECT pg_terminate_backend(%s)", (first,))
        for _ in range(100):
            holders = lock_holders(database_url, worker_id)
            if holders and holders != [first]:
                break
            await asyncio.sleep(0.1)
        assert holders and holders != [first], holders
        assert not keeper.done()
    finally:
        keeper.cancel()
        await asyncio.wait({keeper})
        await session.close()
    await released(database_url, worker_id)


async def test_a_worker_taken_as_dead_while_its_session_was_down_gives_up(database_url):
    """Its jobs were queued again: it must stop rather than hold a lock under a worker id
    that no longer exists."""
    worker_id = register_worker(database_url)
    session = Liveness(database_url, lost_after=1.0)
    await session.open()
    await session.hold(worker_id)
    keeper = asyncio.create_task(session.keep())
    try:
        sql(database_url, "DELETE FROM procrastinate_workers WHERE id = %s", (worker_id,))
        [pid] = lock_holders(database_url, worker_id)
        sql(database_url, "SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(LivenessLost, match="taken as dead"):
            await asyncio.wait_for(keeper, timeout=10)
    finally:
        keeper.cancel()
        await session.close()
    await released(database_url, worker_id)


async def test_procrastinates_worker_holds_its_lock_from_before_its_first_job_until_after_it_stops(
    database_url,
):
    connector = procrastinate.PsycopgConnector(conninfo=database_url, min_size=1, max_size=2)
    app = procrastinate.App(connector=connector)
    seen: list[tuple[int | None, list[int]]] = []

    @app.task(name="look", pass_context=True)
    async def look(context: procrastinate.JobContext) -> None:
        worker_id = context.job.worker_id
        seen.append(
            (worker_id, await asyncio.to_thread(lock_holders, database_url, worker_id or 0))
        )

    async with app.open_async():
        await look.defer_async()
        worker = procrastinate_adapter.Worker(
            app=app,
            liveness=Liveness(database_url, lost_after=STALLED),
            wait=False,
            install_signal_handlers=False,
            stalled_worker_timeout=procrastinate_adapter.NO_PRUNING_SECONDS,
        )
        await asyncio.wait_for(worker.run(), timeout=30)
    [(worker_id, holders)] = seen
    assert worker_id is not None and len(holders) == 1, seen
    await released(database_url, worker_id)
    assert registered(database_url) == []
