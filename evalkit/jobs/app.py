"""The procrastinate application. Tasks register on ``app`` when their modules are imported
(``TASK_MODULES``).

Only the worker opens the app's own connection pool (:func:`connected`). The edge defers
jobs on its own database connection, inside the transaction that writes the rows the job will
act on, so a job exists exactly when its data does::

    async with db.transaction() as conn:
        ...
        await defer(conn, "run_start", run_id=run_id)
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator
from typing import Any

import procrastinate
from procrastinate import RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued, ConnectorException

from evalkit.db import Conn
from evalkit.errors import DatabaseError

TASK_MODULES = [
    "evalkit.jobs.maintenance",
    "evalkit.jobs.runs",
    "evalkit.jobs.settle",
    "evalkit.jobs.otel",
    "evalkit.jobs.scoring",
    "evalkit.jobs.schedules",
]

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(),
    import_paths=TASK_MODULES,
    worker_defaults={"delete_jobs": "successful"},
    periodic_defaults={"max_delay": 600},
)


DATABASE_RETRY = RetryStrategy(
    max_attempts=10, wait=1, linear_wait=1, retry_exceptions={DatabaseError, ConnectorException}
)
"""For jobs with no retry strategy of their own: a database restart or failover under a job
would leave it failed (and a settle job's run waiting for the sweep); it runs again, 1 s
later, then 2, 3... s (about a minute in all). Any other error still fails the job."""


def load_tasks() -> procrastinate.App:
    for module in TASK_MODULES:
        importlib.import_module(module)
    return app


@contextlib.asynccontextmanager
async def connected(url: str, *, max_size: int = 10) -> AsyncIterator[procrastinate.App]:
    """The app with its own pool on ``url``, open for the block (a worker process's life)."""
    load_tasks()
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=max_size)
    with app.replace_connector(connector):
        async with app.open_async():
            yield app


async def defer(
    conn: Conn | None,
    task_name: str,
    *,
    queueing_lock: str | None = None,
    schedule_in: float | None = None,
    **kwargs: Any,
) -> int | None:
    """Queue ``task_name``. On ``conn`` it commits (or rolls back) with the caller's
    transaction; with ``conn=None`` it goes through the worker's own pool.

    With a ``queueing_lock``, a job already waiting under that lock makes this a no-op
    (``None``): the waiting job does the same work.
    """
    load_tasks()
    options: dict[str, Any] = {}
    if queueing_lock is not None:
        options["queueing_lock"] = queueing_lock
    if schedule_in is not None and schedule_in > 0:
        options["schedule_in"] = {"seconds": schedule_in}
    if conn is None:
        task = app.configure_task(task_name, **options)
        try:
            return await task.defer_async(**kwargs)
        except AlreadyEnqueued:
            return None
    task = app.configure_task(task_name, connection=conn.raw, **options)
    try:
        # A savepoint: a refused lock must not abort the caller's transaction.
        async with conn.raw.transaction():
            return await task.defer_async(**kwargs)
    except AlreadyEnqueued:
        return None
