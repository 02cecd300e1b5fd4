"""The procrastinate application. Tasks register on ``app`` when their modules are imported
(``TASK_MODULES``).

Only the worker opens the app's own connection pool (:func:`bind` then ``open_async``). The
edge defers jobs on its own database connection, inside the transaction that writes the rows
the job will act on, so a job exists exactly when its data does::

    async with db.transaction() as conn:
        ...
        await defer(conn, "run_start", run_id=run_id)
"""

from __future__ import annotations

import importlib
from typing import Any

import procrastinate

from evalkit.db import Conn

TASK_MODULES = ["evalkit.jobs.maintenance"]

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(),
    import_paths=TASK_MODULES,
    worker_defaults={"delete_jobs": "successful"},
    periodic_defaults={"max_delay": 600},
)


def load_tasks() -> procrastinate.App:
    for module in TASK_MODULES:
        importlib.import_module(module)
    return app


def bind(url: str, *, max_size: int = 10) -> procrastinate.App:
    """Point the app's pool at ``url`` (a worker process does this once, before opening)."""
    load_tasks()
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=max_size)
    app.connector = connector
    app.job_manager.connector = connector
    return app


async def defer(
    conn: Conn, task_name: str, *, queueing_lock: str | None = None, **kwargs: Any
) -> int:
    """Queue ``task_name`` on ``conn``: it commits (or rolls back) with the caller's transaction."""
    load_tasks()
    options: dict[str, Any] = {"connection": conn.raw}
    if queueing_lock is not None:
        options["queueing_lock"] = queueing_lock
    return await app.configure_task(task_name, **options).defer_async(**kwargs)
