"""Span partitions: made by the migration, ahead by the periodic job, lazily by the
collector, and dropped after the retention period with the keys and sessions they held."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import psycopg
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.config import Settings
from evalkit.db import Database
from evalkit.jobs import runtime
from evalkit.jobs.otel import DAYS_AHEAD, span_partitions
from evalkit.store import otel
from tests.integration.otel_helpers import (
    agent_session,
    exporter,
    make_agent,
    mint,
    recorder,
    sessions,
    stored_spans,
)


def name(day: date) -> str:
    return f"spans_{day:%Y%m%d}"


def partitions(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'spans'::regclass ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


def test_the_migration_makes_today_and_tomorrow(database_url):
    today = datetime.now(UTC).date()
    found = partitions(database_url)
    assert name(today) in found and name(today + timedelta(days=1)) in found


async def test_periodic_job_creates_ahead_and_drops_old(database_url):
    today = datetime.now(UTC).date()
    db = Database(database_url)
    await db.open()
    try:
        async with db.connection() as conn:
            old = today - timedelta(days=40)
            assert await otel.ensure_partition(conn, old)
            assert not await otel.ensure_partition(conn, old)  # idempotent
        runtime.install(db, Settings())
        result = await span_partitions(timestamp=0)
    finally:
        await db.close()
    assert result["dropped"] == [name(old)]
    ahead = [name(today + timedelta(days=n)) for n in range(DAYS_AHEAD + 1)]
    assert set(ahead) <= set(partitions(database_url))
    assert name(old) not in partitions(database_url)


def test_collector_creates_a_missing_partition(server, admin_token):
    today = datetime.now(UTC).date()
    with psycopg.connect(server.db_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {name(today)}")
    make_agent(server, admin_token, "admin")
    token = mint(server, admin_token, "admin")
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS
    assert name(today) in partitions(server.db_url)
    assert len(stored_spans(server)) == 3 and sessions(server)["s1"]["spans"] == 3
