"""What evalkit needs from procrastinate that its public API does not offer, in one place.

Checked against procrastinate 3.10.0; ``pyproject.toml`` pins procrastinate to ``>=3.10,<3.11``,
the range this module was tested on. Everything else evalkit does with procrastinate goes
through its public API (``App``, ``App.replace_connector``, tasks, ``RetryStrategy``,
``App.job_manager``'s documented methods).

On an upgrade, re-check (``tests/integration/test_procrastinate_adapter.py`` fails on most):

- ``Worker._persist_job_status(job, status, retry_decision, context, job_result)`` is still
  the private step that records a job's outcome, and still retries through
  ``JobManager.retry_job``. Procrastinate's retry sets the job back to ``todo`` with a bare
  ``UPDATE`` (``procrastinate_retry_job_v2``); when another job already waits under the same
  queueing lock, the unique index ``QUEUEING_LOCK_CONSTRAINT`` refuses it, ``UniqueViolation``
  escapes, and the job stays ``doing`` under a live worker, where nothing takes it back
  (procrastinate issues #1446 and #1543, open). If a release handles that itself, drop
  :class:`Worker` and :func:`retry_or_drop`.
- ``Worker.run`` registers the worker (``JobManager.register_worker``) and then awaits
  ``Worker._run_loop``, which fetches jobs and, in its ``finally``, waits for the running
  ones and unregisters the worker: :class:`Worker` takes its liveness lock
  (:mod:`evalkit.jobs.liveness`) at the start of ``_run_loop`` and lets go of it after.
  ``Worker.run`` prunes workers by heartbeat age (``stalled_worker_timeout``); evalkit turns
  that off (:data:`NO_PRUNING_SECONDS`) and removes dead workers itself.
  ``procrastinate_workers`` keeps its columns ``id`` and ``last_heartbeat``,
  ``procrastinate_jobs.worker_id`` its ``ON DELETE SET NULL``, and ``Job.from_row`` the
  columns ``procrastinate_jobs_abandoned`` selects.
- ``JobManager.batch_defer_jobs_async`` and ``JobDeferrer.make_new_job``: the public
  ``batch_defer_async`` takes one queueing lock for all its jobs, :func:`defer_under_locks`
  needs one per job.
- ``procrastinate_jobs``: its columns ``queueing_lock``, ``status``, ``task_name``,
  ``args`` and ``worker_id`` and the statuses ``todo``, ``doing`` and ``failed``, read by the
  statements of ``evalkit/sql/procrastinate.sql`` (run only from here and from
  :mod:`evalkit.jobs.liveness`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import procrastinate
import procrastinate.worker
from procrastinate.exceptions import UniqueViolation
from procrastinate.jobs import Job, Status
from procrastinate.manager import QUEUEING_LOCK_CONSTRAINT, JobManager
from procrastinate.retry import RetryDecision

from evalkit.db import Conn
from evalkit.jobs.liveness import Liveness
from evalkit.store.scores import JobCounts

NO_PRUNING_SECONDS = 100 * 365 * 24 * 3600.0
"""``stalled_worker_timeout`` for procrastinate's worker: it would remove, at each start,
workers whose heartbeat is that old, live or not (a worker whose event loop is blocked
still holds its jobs); evalkit removes the dead ones itself."""


class Worker(procrastinate.worker.Worker):
    """Procrastinate's worker, with two differences: it holds its liveness lock on
    ``liveness`` while it runs (from before its first job until its last is over), and a
    job to be retried while another job waits under its queueing lock is dropped instead
    (see :func:`retry_or_drop`)."""

    def __init__(self, *, liveness: Liveness | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.liveness = liveness

    async def run(self) -> None:
        if self.liveness is None:
            await super().run()  # type: ignore[no-untyped-call]
            return
        await self.liveness.open()
        try:
            await super().run()  # type: ignore[no-untyped-call]
        finally:
            await self.liveness.close()

    async def _run_loop(self) -> None:
        if self.liveness is None:
            await super()._run_loop()  # type: ignore[no-untyped-call]
            return
        assert self.worker_id is not None
        await self.liveness.hold(self.worker_id)
        keeper = asyncio.create_task(self.liveness.keep(), name="liveness")
        keeper.add_done_callback(lambda task: task.cancelled() or self.stop())  # type: ignore[no-untyped-call]
        try:
            await super()._run_loop()  # type: ignore[no-untyped-call]
        finally:
            keeper.cancel()
            await asyncio.wait({keeper})
        if not keeper.cancelled() and (lost := keeper.exception()) is not None:
            raise lost

    async def _persist_job_status(
        self,
        job: Job,
        status: Status,
        retry_decision: RetryDecision | None,
        context: Any,
        job_result: Any,
    ) -> None:
        try:
            await super()._persist_job_status(job, status, retry_decision, context, job_result)
        except UniqueViolation as error:
            if retry_decision is None or not is_queueing_lock_taken(error):
                raise
            await drop(self.app.job_manager, job)


async def retry_or_drop(manager: JobManager, job: Job) -> bool:
    """Put ``job`` back in the queue, or, when another job already waits under its queueing
    lock (that one does the same work), drop it. Whether it was put back."""
    try:
        await manager.retry_job(job)
    except UniqueViolation as error:
        if not is_queueing_lock_taken(error):
            raise
        await drop(manager, job)
        return False
    return True


def is_queueing_lock_taken(error: UniqueViolation) -> bool:
    return error.constraint_name == QUEUEING_LOCK_CONSTRAINT


async def drop(manager: JobManager, job: Job) -> None:
    await manager.finish_job(job=job, status=Status.ABORTED, delete_job=True)


async def defer_under_locks(
    app: procrastinate.App,
    conn: Conn,
    task_name: str,
    kwargs_by_lock: Mapping[str, dict[str, Any]],
    *,
    schedule_in: float = 0,
) -> None:
    """Queue one ``task_name`` job per queueing lock, with its arguments, in one statement in
    the caller's transaction. A lock already taken refuses them all: ``AlreadyEnqueued``,
    and the caller's transaction goes on without them (the statement ran in a savepoint)."""
    options: dict[str, Any] = {"schedule_in": {"seconds": schedule_in}} if schedule_in > 0 else {}
    jobs = [
        app.configure_task(
            task_name, allow_unknown=False, queueing_lock=lock, **options
        ).make_new_job(**kwargs)
        for lock, kwargs in kwargs_by_lock.items()
    ]
    async with conn.raw.transaction():
        await app.job_manager.batch_defer_jobs_async(jobs, connection=conn.raw)


async def waiting_locks(conn: Conn, locks: Iterable[str]) -> set[str]:
    """Those of ``locks`` a job waits under (``todo``): a defer under them is refused."""
    rows = await conn.all("procrastinate_waiting_locks", locks=list(locks))
    return {row["queueing_lock"] for row in rows}


async def live_locks(conn: Conn, locks: Iterable[str]) -> set[str]:
    """Those of ``locks`` a job waits or runs under (``todo`` or ``doing``)."""
    rows = await conn.all("procrastinate_live_locks", locks=list(locks))
    return {row["queueing_lock"] for row in rows}


async def without_live_jobs(conn: Conn, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows (each with ``locks``, the queueing locks of the jobs that would act on it)
    that no job waits or runs under."""
    live = await live_locks(conn, {lock for row in rows for lock in row["locks"] if lock})
    return [row for row in rows if live.isdisjoint(row["locks"])]


async def jobs_per_round(conn: Conn, task_name: str, experiment_id: int) -> dict[int, JobCounts]:
    """The jobs of ``task_name`` over the experiment's runs (their ``run_id`` argument), per
    their ``round`` argument."""
    rows = await conn.all(
        "procrastinate_jobs_per_round", task_name=task_name, experiment_id=experiment_id
    )
    return {row["round"]: JobCounts(pending=row["pending"], failed=row["failed"]) for row in rows}


async def abandoned_jobs(conn: Conn, dead_workers: Iterable[int]) -> list[Job]:
    """The jobs the ``dead_workers`` were running, and those whose worker was removed."""
    rows = await conn.all("procrastinate_jobs_abandoned", worker_ids=list(dead_workers))
    return [Job.from_row(row) for row in rows]
