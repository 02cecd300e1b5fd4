"""Housekeeping jobs: stale login tokens, jobs of workers that died."""

from __future__ import annotations

import logging

from procrastinate import App, JobContext

from evalkit.jobs import queue, runtime
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
    """Put jobs of workers that stopped sending heartbeats back in the queue."""
    return await requeue_stalled(context.app, runtime.settings().worker.stalled_seconds)


async def requeue_stalled(jobs: App, seconds: float) -> int:
    """Queue again the jobs of workers silent for ``seconds`` (run at worker start too)."""
    manager = jobs.job_manager
    stalled = list(await manager.get_stalled_jobs(seconds_since_heartbeat=seconds))
    for job in stalled:
        log.warning("retrying job %s (%s) of a worker that stopped", job.id, job.task_name)
        # A job under the same queueing lock may already wait (the dead job deferred its own
        # next step, or the edge deferred a dispatch): that one does the same work.
        await retry_or_drop(manager, job)
    return len(stalled)


async def retry_stalled_later(seconds: float) -> None:
    """Queue one more retry of stalled jobs ``seconds`` from now, besides the once-a-minute
    one. A worker started at once after another was killed queues it for when the dead
    worker's last heartbeat is ``worker.stalled_seconds`` old: its jobs go back to the queue
    then, not at the first minute mark after."""
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
