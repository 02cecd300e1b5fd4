"""The procrastinate application. Tasks register on ``app`` when their modules are imported
(``TASK_MODULES``); :mod:`evalkit.jobs.queue` queues them.

Only the worker opens the app's own connection pool (:func:`connected`). The edge queues
jobs on its own database connection (see :mod:`evalkit.jobs.queue`).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator

import procrastinate
from procrastinate import RetryStrategy
from procrastinate.exceptions import ConnectorException

from evalkit.errors import DatabaseError

TASK_MODULES = [
    "evalkit.jobs.maintenance",
    "evalkit.jobs.runs",
    "evalkit.jobs.settle",
    "evalkit.jobs.otel",
    "evalkit.jobs.scoring",
    "evalkit.jobs.schedules",
    "evalkit.jobs.monitors",
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
