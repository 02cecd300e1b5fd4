"""The procrastinate application. Tasks register on ``app`` when their modules are imported
(``TASK_MODULES``); :mod:`evalkit.jobs.queue` queues them.

Only the worker opens the app's own connection pool (:func:`bind` then ``open_async``). The
edge queues jobs on its own database connection (see :mod:`evalkit.jobs.queue`).
"""

from __future__ import annotations

import importlib
from typing import Any

import procrastinate
import procrastinate.jobs
import procrastinate.worker
from procrastinate import RetryStrategy
from procrastinate.exceptions import ConnectorException, UniqueViolation

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


class Worker(procrastinate.worker.Worker):
    """Procrastinate's worker, with one difference: a job to be retried while another job
    waits under its queueing lock is dropped instead, since the waiting one does the same
    work (see :func:`defer`). Procrastinate's retry would break the lock's unique index,
    raise, and leave the job ``doing`` under a live worker, where nothing takes it back."""

    async def _persist_job_status(
        self,
        job: procrastinate.jobs.Job,
        status: procrastinate.jobs.Status,
        retry_decision: Any,
        context: Any,
        job_result: Any,
    ) -> None:
        try:
            await super()._persist_job_status(job, status, retry_decision, context, job_result)
        except UniqueViolation:
            if retry_decision is None:
                raise
            await self.app.job_manager.finish_job(
                job=job, status=procrastinate.jobs.Status.ABORTED, delete_job=True
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
