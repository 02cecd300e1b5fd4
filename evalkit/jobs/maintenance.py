"""Housekeeping jobs: stale login tokens, jobs of workers that died."""

from __future__ import annotations

import logging

from procrastinate import App, JobContext

from evalkit.db import Database
from evalkit.jobs import liveness, procrastinate_adapter, queue, runtime
from evalkit.jobs.app import DATABASE_RETRY, app
from evalkit.jobs.procrastinate_adapter import retry_or_drop

log = logging.getLogger("evalkit.jobs")


@app.periodic(cron="*/1 * * * *", periodic_id="retry-stalled-jobs")
@app.task(
    name=queue.RETRY_STALLED_JOBS,
    queueing_lock=queue.RETRY_STALLED_JOBS,
    retry=DATABASE_RETRY,
    pass_context=True,
)
async def retry_stalled_jobs(context: JobContext, timestamp: int) -> int:
    """Put the jobs of dead workers back in the queue (see :mod:`evalkit.jobs.liveness`)."""
    settings = runtime.settings()
    return await take_back_abandoned_jobs(
        context.app, runtime.database(), settings.worker.stalled_seconds
    )


TAKE_BACK_MARGIN_SECONDS = 0.5
"""How long after a dying worker counts as dead the retry queued for it runs."""


async def take_back_abandoned_jobs(jobs: App, db: Database, stalled_seconds: float) -> int:
    """Queue again the jobs of dead workers (and of workers removed under their jobs), and
    unregister the dead workers; how many jobs. Run at every worker start and once a minute.

    A worker killed a moment ago may not count as dead yet (its last heartbeat is recent):
    one more retry is queued for when it will, so a worker restarted at once by a
    supervisor takes back its predecessor's jobs within seconds."""
    manager = jobs.job_manager
    async with db.transaction() as conn:
        await conn.one("worker_liveness_sweep_lock", namespace=liveness.LOCK_NAMESPACE)
        found = await liveness.workers(conn)
        dead = [w.id for w in found if w.dead]
        abandoned = await procrastinate_adapter.abandoned_jobs(conn, dead)
        for job in abandoned:
            log.warning("retrying job %s (%s) of a worker that died", job.id, job.task_name)
            # A job under the same queueing lock may already wait (the dead job deferred its
            # own next step, or the edge deferred a dispatch): that one does the same work.
            await retry_or_drop(manager, job)
        for worker_id in dead:
            await manager.unregister_worker(worker_id)
    for worker in found:
        if worker.stuck(stalled_seconds):
            log.warning(
                "worker %s holds its liveness lock but sent no heartbeat for %.0f s: its "
                "process is alive but stuck; its %d jobs stay with it (restart it if it does "
                "not come back)",
                worker.id, worker.silent_for, worker.doing,
            )  # fmt: skip
    wait = liveness.seconds_until_next_death(found)
    if wait is not None:
        await retry_stalled_later(wait + TAKE_BACK_MARGIN_SECONDS)
    return len(abandoned)


async def retry_stalled_later(seconds: float) -> None:
    """Queue one more retry of stalled jobs ``seconds`` from now, besides the once-a-minute
    one (a no-op when one already waits: when that one runs, it queues the next)."""
    await queue.defer(
        None, queue.RETRY_STALLED_JOBS, queueing_lock=queue.RETRY_STALLED_JOBS,
        schedule_in=seconds, timestamp=0,
    )  # fmt: skip


@app.periodic(cron="17 * * * *", periodic_id="delete-stale-login-tokens")
@app.task(
    name=queue.DELETE_STALE_LOGIN_TOKENS,
    queueing_lock=queue.DELETE_STALE_LOGIN_TOKENS,
    retry=DATABASE_RETRY,
)
async def delete_stale_login_tokens(timestamp: int) -> None:
    async with runtime.database().connection() as conn:
        await conn.execute("login_token_delete_stale")
