"""Monitor jobs: the sweep that takes settled sessions for each monitor, and the job that
scores one taken session (see :mod:`evalkit.scoring.monitoring`).

Ingest never waits for a monitor: the sweep reads the ``sessions`` rows the collector
already keeps, so an active monitor adds nothing to a batch's transaction. While a monitor
exists the sweep queues itself again every ``otel.settle_seconds``; a periodic tick each
minute starts it after a restart, and creating a monitor starts it at once.
"""

from __future__ import annotations

import logging

from procrastinate import JobContext, RetryStrategy

from evalkit.jobs import queue, runtime
from evalkit.jobs.app import DATABASE_RETRY, app
from evalkit.scoring import monitoring
from evalkit.store import monitors as store

log = logging.getLogger("evalkit.monitors")

MIN_SWEEP_SECONDS = 1.0
SCORE_RETRY = RetryStrategy(max_attempts=5, exponential_wait=1)
"""Retries of a scoring job that raised (a database hiccup); evaluator failures are scores."""


@app.periodic(cron="*/1 * * * *", periodic_id="monitor-tick")
@app.task(name=queue.MONITOR_TICK, queueing_lock=queue.MONITOR_TICK, retry=DATABASE_RETRY)
async def monitor_tick(timestamp: int) -> str:
    await queue.defer_monitor_sweep(None)
    return "sweep queued"


@app.task(
    name=queue.MONITOR_SWEEP,
    queueing_lock=queue.MONITOR_SWEEP_LOCK,
    lock=queue.MONITOR_SWEEP_LOCK,
    retry=DATABASE_RETRY,
)
async def monitor_sweep() -> str:
    db = runtime.database()
    settle = runtime.settings().otel.settle_seconds
    async with db.connection() as conn:
        ids = await store.all_ids(conn)
    taken = 0
    for monitor_id in ids:
        taken += await monitoring.sweep_monitor(db, monitor_id, settle_seconds=settle)
    if ids:
        await queue.defer_monitor_sweep(None, after=max(settle, MIN_SWEEP_SECONDS))
    return f"{taken} sessions taken by {len(ids)} monitors"


@app.task(name=queue.SCORE_MONITORED, retry=SCORE_RETRY, pass_context=True)
async def score_monitored_session(
    context: JobContext, monitor_id: int, version: int, session_id: str
) -> str:
    db = runtime.database()
    async with db.connection() as conn:
        monitor = await store.get_by_id(conn, monitor_id)
    if monitor is None:
        return "the monitor was deleted"
    if monitor["version"] != version:
        # what version `version` scored with is gone; the new version takes sessions anew
        return f"the monitor is at version {monitor['version']} now; nothing scored"
    return await monitoring.score_session(
        db,
        monitor,
        version,
        session_id,
        settings=runtime.settings(),
        http=runtime.http_client(),
    )
