"""The collector's periodic jobs and its settle-job queueing.

Span partitions: the migration creates today's and tomorrow's partitions and the collector
creates a missing one itself, so a fresh server takes spans before any worker ran;
``span_partitions`` keeps ``DAYS_AHEAD`` days ready so the collector rarely has to, and
drops those past ``otel.retention_days``.

Traces whose root span never arrives: the collector holds a trace's spans until its root
comes (the root's session is the trace's). ``orphan_traces`` gives a trace that has been
quiet for ``otel.orphan_seconds`` without its root the session one of its spans names, or
marks it an orphan trace, listed as such by ``evalkit traces list``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from procrastinate.exceptions import AlreadyEnqueued

from evalkit.config import OtelSettings
from evalkit.db import Conn, Database
from evalkit.jobs import procrastinate_adapter
from evalkit.jobs.app import DATABASE_RETRY, app, defer, load_tasks

log = logging.getLogger("evalkit.otel")

DAYS_AHEAD = 3


@app.periodic(cron="7 * * * *", periodic_id="span-partitions")
@app.task(name="span_partitions", queueing_lock="span_partitions", retry=DATABASE_RETRY)
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


ORPHAN_BATCH = 200
"""Traces looked at per round of the orphan job (each in its own short transaction)."""
ORPHAN_ROUNDS = 25
"""Rounds per run at most; what is left waits for the next minute."""


@app.periodic(cron="* * * * *", periodic_id="orphan-traces")
@app.task(name="orphan_traces", queueing_lock="orphan_traces", retry=DATABASE_RETRY)
async def orphan_traces(timestamp: int) -> dict[str, int]:
    """Give traces whose root span never came a session from their spans, or mark them
    orphan traces."""
    from evalkit.jobs.runtime import database, settings

    return await settle_orphans(database(), settings().otel)


async def settle_orphans(
    db: Database, otel: OtelSettings, *, now: datetime | None = None
) -> dict[str, int]:
    """Every trace without its root span and quiet for ``otel.orphan_seconds`` at ``now``
    either joins the session one of its spans names (first the topmost spans', per the
    agent's mapping; a run waiting on that session gets its settle job) or becomes an orphan
    trace. Counts of each."""
    from evalkit.store import otel as store

    before = (now or datetime.now(UTC)) - timedelta(seconds=otel.orphan_seconds)
    counts = {"assigned": 0, "orphans": 0}
    names: dict[int, list[str]] = {}
    for _ in range(ORPHAN_ROUNDS):
        async with db.connection() as conn:
            found = await store.traces_waiting_root(conn, before, ORPHAN_BATCH)
        for agent_id, trace_id in found:
            async with db.transaction() as conn:
                if agent_id not in names:
                    names[agent_id] = await store.session_names(conn, agent_id)
                outcome = await store.settle_orphan(
                    conn,
                    agent_id,
                    trace_id,
                    names=names[agent_id],
                    before=before,
                    max_session_bytes=otel.max_session_bytes,
                )
                if outcome is None:  # its root or a new span came meanwhile
                    continue
                if outcome.session_id is None:
                    counts["orphans"] += 1
                    continue
                counts["assigned"] += 1
                if outcome.waiting:
                    await defer_settles(conn, agent_id, [outcome.session_id], 0)
        if len(found) < ORPHAN_BATCH:
            break
    if counts["assigned"] or counts["orphans"]:
        log.info(
            "traces without their root span: %d joined the session a span names, %d orphans",
            counts["assigned"],
            counts["orphans"],
        )
    return counts


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
    waiting = await procrastinate_adapter.waiting_locks(conn, locks)
    todo = {lock: session for lock, session in locks.items() if lock not in waiting}
    if not todo:
        return
    load_tasks()
    try:
        await procrastinate_adapter.defer_under_locks(
            app,
            conn,
            SETTLE_TASK,
            {lock: {"agent_id": agent_id, "session_id": s} for lock, s in todo.items()},
            schedule_in=after,
        )
    except AlreadyEnqueued:
        for lock, session in todo.items():
            await defer(
                conn,
                SETTLE_TASK,
                queueing_lock=lock,
                schedule_in=after,
                agent_id=agent_id,
                session_id=session,
            )
