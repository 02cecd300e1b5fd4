"""The job worker: `server --with-worker` runs procrastinate jobs against the database."""

from __future__ import annotations

import asyncio
import contextlib
import time

import psycopg
import pytest
from procrastinate.exceptions import TaskNotFound

from evalkit.db import Database
from evalkit.jobs import queue
from evalkit.jobs.app import load_tasks
from evalkit.jobs.queue import defer
from tests.conftest import start_server


def test_with_worker_runs_jobs(database_url, tmp_path):
    running = start_server(database_url, tmp_path, worker=True)
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            (user_id,) = conn.execute("SELECT id FROM users WHERE username = 'admin'").fetchone()
            conn.execute(
                "INSERT INTO login_tokens (user_id, token_hash, expires_at) "
                "VALUES (%s, 'stale', now() - interval '2 days'),"
                " (%s, 'fresh', now() + interval '1 day')",
                (user_id, user_id),
            )

        async def defer_in_a_transaction() -> int:
            db = Database(database_url)
            await db.open()
            try:
                async with db.transaction() as conn:
                    return await defer(conn, "delete_stale_login_tokens", timestamp=0)
            finally:
                await db.close()

        job_id = asyncio.run(defer_in_a_transaction())
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            with psycopg.connect(database_url) as conn:
                row = conn.execute(
                    "SELECT status FROM procrastinate_jobs WHERE id = %s", (job_id,)
                ).fetchone()
            status = row[0] if row else "deleted"  # successful jobs are deleted
            if status in ("succeeded", "deleted", "failed"):
                break
            time.sleep(0.1)
        assert status in ("succeeded", "deleted"), status
        with psycopg.connect(database_url) as conn:
            left = [bytes(r[0]) for r in conn.execute("SELECT token_hash FROM login_tokens")]
        assert left == [b"fresh"]
    finally:
        running.stop()


def test_periodic_tasks_are_registered():
    app = load_tasks()
    assert {"retry_stalled_jobs", "delete_stale_login_tokens"} <= set(app.tasks)
    periodic = {t.periodic_id for t in app.periodic_registry.periodic_tasks.values()}
    assert {"retry-stalled-jobs", "delete-stale-login-tokens"} <= periodic


def test_the_queues_task_names_are_the_registered_tasks():
    registered = {
        name for name in load_tasks().tasks if not name.startswith(("builtin:", "procrastinate."))
    }
    assert registered == set(queue.TASK_NAMES), (
        "evalkit.jobs.queue names a task no module registers, or a task is registered under "
        f"a name queue.py lacks: {sorted(registered ^ set(queue.TASK_NAMES))}"
    )


async def test_queueing_an_unknown_task_is_refused():
    with pytest.raises(TaskNotFound):
        await queue.defer(None, "no_such_task")


def test_a_rolled_back_transaction_defers_nothing(database_url):
    async def defer_then_fail() -> None:
        db = Database(database_url)
        await db.open()
        try:
            async with db.transaction() as conn:
                await defer(conn, "delete_stale_login_tokens", timestamp=0)
                raise RuntimeError("the request failed after deferring")
        finally:
            await db.close()

    with contextlib.suppress(RuntimeError):
        asyncio.run(defer_then_fail())
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM procrastinate_jobs").fetchone() == (0,)
