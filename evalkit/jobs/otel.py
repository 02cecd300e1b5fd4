"""Span partitions: created a few days ahead, dropped after ``otel.retention_days``.

The migration creates today's and tomorrow's partitions and the collector creates a
missing one itself, so a fresh server takes spans before any worker ran; this job keeps
``DAYS_AHEAD`` days ready so the collector rarely has to.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from evalkit.jobs.app import app

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
