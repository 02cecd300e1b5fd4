"""Span partitions: created a few days ahead, dropped after ``otel.retention_days``.

The migration creates today's and tomorrow's partitions and the collector creates a
missing one itself, so a fresh server takes spans before any worker ran; this job keeps
``DAYS_AHEAD`` days ready so the collector rarely has to.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from procrastinate.exceptions import AlreadyEnqueued

from evalkit.db import Conn
from evalkit.jobs.app import app, defer, load_tasks

log = logging.getLogger("evalkit.otel")

DAYS_AHEAD = 3


@app.periodic(cron="7 * * * *", periodic_id="span-partitions")
@app.task(name="span_partitions", queueing_lock="span_partitions")
async def span_partitions(timestamp: int) -> dict[str, list[str]]:
    """Create the coming days' span partitions and drop those past retention."""
    from evalkit.jobs.runtime import database, settings
    from evalkit.store import otel

    today = datetime.now(UTC).date()
    async with database().connection() as conn:
        created = await otel.ensure_partitions_ahead(conn, today, DAYS_AHEAD)
        dropped = await otel.drop_old_partitions(conn, today, settings().otel.retention_days)
    for name in dropped:
        log.info("dropped span partition %s (older than otel.retention_days)", name)
    return {"created": [day.isoformat() for day in created], "dropped": dropped}


SETTLE_TASK = "settle_session"


def settle_lock(agent_id: int, session_id: str) -> str:
    return f"settle:{agent_id}:{session_id}"


async def defer_settles(conn: Conn, agent_id: int, session_ids: list[str], after: float) -> None:
    """Queue ``settle_session`` for each session, in the caller's transaction, as
    :func:`evalkit.jobs.app.defer` with a queueing lock would one by one, in two statements:
    sessions that already have a waiting job are skipped, the others are queued at once.
    A lock taken meanwhile by a concurrent batch falls back to one defer per session."""
    if not session_ids:
        return
    locks = {settle_lock(agent_id, s): s for s in session_ids}
    waiting = {
        row["queueing_lock"] for row in await conn.all("settle_job_list_waiting", locks=list(locks))
    }
    todo = [session for lock, session in locks.items() if lock not in waiting]
    if not todo:
        return
    load_tasks()
    options: dict[str, Any] = {"schedule_in": {"seconds": after}} if after > 0 else {}
    jobs = [
        app.configure_task(
            SETTLE_TASK, queueing_lock=settle_lock(agent_id, session), **options
        ).make_new_job(agent_id=agent_id, session_id=session)
        for session in todo
    ]
    try:
        async with conn.raw.transaction():  # a savepoint: a taken lock must not abort ours
            await app.job_manager.batch_defer_jobs_async(jobs, connection=conn.raw)
    except AlreadyEnqueued:
        for session in todo:
            await defer(
                conn,
                SETTLE_TASK,
                queueing_lock=settle_lock(agent_id, session),
                schedule_in=after,
                agent_id=agent_id,
                session_id=session,
            )
