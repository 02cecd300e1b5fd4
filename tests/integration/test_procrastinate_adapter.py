"""What evalkit relies on procrastinate for beyond its public API (see
:mod:`evalkit.jobs.procrastinate_adapter`), against the real PostgreSQL and procrastinate's
own worker. A failure here after a procrastinate upgrade means the adapter needs a look."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import procrastinate
import psycopg
import pytest
from procrastinate import RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued

from evalkit.db import Conn, Database
from evalkit.jobs import procrastinate_adapter as adapter
from evalkit.store.scores import JobCounts

LOCK = "twin:1"


@pytest.fixture
async def jobs(database_url: str) -> AsyncIterator[procrastinate.App]:
    """An app of the test's own (not evalkit's, whose tasks it would add to), open."""
    connector = procrastinate.PsycopgConnector(conninfo=database_url, min_size=1, max_size=2)
    app = procrastinate.App(connector=connector)
    async with app.open_async():
        yield app


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[Conn]:
    db = Database(database_url)
    await db.open()
    try:
        async with db.connection() as opened:
            yield opened
    finally:
        await db.close()


def insert_job(database_url: str, status: str, lock: str | None, **args: object) -> int:
    with psycopg.connect(database_url, autocommit=True) as db:
        row = db.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, queueing_lock, args, status) "
            "VALUES ('default', %s, %s, %s, %s) RETURNING id",
            (args.pop("task", "twin"), lock, json.dumps(args), status),
        ).fetchone()
    assert row is not None
    return int(row[0])


def jobs_left(database_url: str) -> list[tuple[int, str]]:
    with psycopg.connect(database_url) as db:
        rows = db.execute("SELECT id, status::text FROM procrastinate_jobs ORDER BY id")
        return [(row[0], row[1]) for row in rows.fetchall()]


async def test_the_worker_drops_a_retry_whose_lock_a_waiting_job_holds_and_goes_on(
    jobs, database_url
):
    """A job queues its own next step (allowed: it is ``doing``, the lock only covers
    ``todo``), then fails and is to be retried: the retry would break the lock. The worker
    drops the failed job and runs the waiting one. Procrastinate's own worker left the
    failed job ``doing`` under a live worker, where nothing took it back."""
    ran: list[int] = []

    @jobs.task(name="twin", queueing_lock=LOCK, retry=RetryStrategy(max_attempts=3))
    async def twin(step: int) -> None:
        ran.append(step)
        if step == 0:
            await twin.defer_async(step=1)
            raise RuntimeError("as a database restart under the job would")

    await twin.defer_async(step=0)
    worker = adapter.Worker(
        app=jobs, wait=False, install_signal_handlers=False, delete_jobs="successful"
    )
    await asyncio.wait_for(worker.run(), timeout=30)
    assert ran == [0, 1]
    assert jobs_left(database_url) == []


async def test_a_stalled_job_is_put_back_unless_a_job_waits_under_its_lock(jobs, database_url):
    free = insert_job(database_url, "doing", "free:1")
    stalled = insert_job(database_url, "doing", LOCK)
    waiting = insert_job(database_url, "todo", LOCK)
    manager = jobs.job_manager
    for job_id, put_back in ((free, True), (stalled, False)):
        [job] = await manager.list_jobs_async(id=job_id)
        assert await adapter.retry_or_drop(manager, job) is put_back
    assert jobs_left(database_url) == [(free, "todo"), (waiting, "todo")]


async def test_locks_seen_waiting_and_live(conn, database_url):
    for status in ("todo", "doing", "succeeded", "failed", "aborted"):
        insert_job(database_url, status, f"lock:{status}")
    asked = ["lock:todo", "lock:doing", "lock:succeeded", "lock:failed", "lock:aborted", "none"]
    assert await adapter.waiting_locks(conn, asked) == {"lock:todo"}
    assert await adapter.live_locks(conn, asked) == {"lock:todo", "lock:doing"}
    rows = [
        {"id": 1, "locks": ["lock:doing", None]},
        {"id": 2, "locks": ["lock:succeeded", "lock:failed"]},
        {"id": 3, "locks": ["none", "lock:todo"]},
        {"id": 4, "locks": ["none", None]},
    ]
    assert [row["id"] for row in await adapter.without_live_jobs(conn, rows)] == [2, 4]


async def test_jobs_counted_per_round(conn, database_url):
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("SET session_replication_role = replica")  # runs without their parents
        db.execute(
            "INSERT INTO runs (id, experiment_id, agent_id, case_version_id, case_id, repetition) "
            "OVERRIDING SYSTEM VALUE "
            "VALUES (1, 10, 1, 1, 'a', 1), (2, 10, 1, 2, 'b', 1), (3, 11, 1, 3, 'c', 1)"
        )
    for status, run_id, round_ in (
        ("todo", 1, 1),
        ("doing", 2, 1),
        ("failed", 1, 2),
        ("todo", 1, 2),
        ("succeeded", 2, 2),
        ("todo", 3, 1),  # a run of another experiment
    ):
        insert_job(database_url, status, None, task="score", run_id=run_id, round=round_)
    insert_job(database_url, "todo", None, task="other", run_id=1, round=1)
    counts = await adapter.jobs_per_round(conn, "score", 10)
    assert counts == {1: JobCounts(pending=2, failed=0), 2: JobCounts(pending=1, failed=1)}


async def test_a_batch_under_locks_is_one_statement_that_a_taken_lock_refuses(
    jobs, conn, database_url
):
    @jobs.task(name="twin")
    async def twin(n: int) -> None: ...

    async with conn.transaction():
        await adapter.defer_under_locks(jobs, conn, "twin", {"a": {"n": 1}, "b": {"n": 2}})
        with pytest.raises(AlreadyEnqueued):
            await adapter.defer_under_locks(jobs, conn, "twin", {"c": {"n": 3}, "a": {"n": 4}})
        # the caller's transaction goes on
        await adapter.defer_under_locks(jobs, conn, "twin", {"d": {"n": 5}}, schedule_in=60)
    with psycopg.connect(database_url) as db:
        rows = db.execute(
            "SELECT queueing_lock, args, scheduled_at IS NOT NULL FROM procrastinate_jobs "
            "ORDER BY id"
        ).fetchall()
    assert rows == [("a", {"n": 1}, False), ("b", {"n": 2}, False), ("d", {"n": 5}, True)]
