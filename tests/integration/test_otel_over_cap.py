"""A session that a concurrent batch takes over its cap is counted again, exactly.

``store.copy_batch`` locks a session before its COPY only when the batch could take it over
the cap as last committed. Two batches each under the cap, together over it, can both skip
the lock: the second's write-back then waits for the first's commit, finds the session over
the cap, and fails with it (``OverCap``); the edge ingests it again with ``exact=True``,
which refuses the spans past the cap. On the real PostgreSQL.
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from evalkit.db import Database
from evalkit.otel.otlp import Incoming, decode_protobuf
from evalkit.store import otel as store
from tests.integration.db_helpers import sql
from tests.integration.test_otel_agent_hold import (
    NAMES,
    NOW,
    START,
    agent,
    wait_until_blocked,
    workspace,
)


def trace(seed: int, session: str) -> list[Incoming]:
    """A trace of three spans (a root and two children) in ``session``."""
    trace_id, root_id = bytes([seed]) * 16, bytes([seed]) * 8
    made = [
        Span(
            trace_id=trace_id,
            span_id=bytes([seed]) * 7 + bytes([n]),
            parent_span_id=b"" if n == seed else root_id,
            name=f"step {n}",
            start_time_unix_nano=START + n,
            end_time_unix_nano=START + 1000,
            attributes=[KeyValue(key="session.id", value=AnyValue(string_value=session))],
        )
        for n in (seed, 1, 2)
    ]
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=made)])]
    ).SerializeToString()
    return decode_protobuf(body).spans


async def test_a_session_a_concurrent_batch_took_over_the_cap_is_counted_again(
    db: Database, database_url: str
) -> None:
    async with db.connection() as conn:
        await store.ensure_partition(conn, NOW.date())
    agent_id = agent(database_url, workspace(database_url), "bot")
    first, second = trace(3, "shared"), trace(4, "shared")
    cap = sum(s.size for s in first + second) - 1  # each fits alone; the two do not

    async def ingest(batch: list[Incoming], *, exact: bool = False) -> store.IngestResult:
        """As the edge does: the write-back sent with the COMMIT."""
        async with db.pipelined_transaction() as conn:
            copied = await store.copy_batch(
                conn,
                agent_id,
                batch,
                session_names=NAMES,
                max_session_bytes=cap,
                received_at=NOW,
                exact=exact,
            )
            await copied.write_back(conn, commit=True)
        return copied.result

    async with db.pipelined_transaction() as conn:
        stored = await store.copy_batch(
            conn, agent_id, first, session_names=NAMES, max_session_bytes=cap, received_at=NOW
        )
        await stored.write_back(conn)
        assert stored.result.stored == 3
        concurrent = asyncio.create_task(ingest(second))
        await wait_until_blocked(database_url, concurrent)  # on the session's row
        assert not concurrent.done()
    with pytest.raises(store.OverCap):
        await concurrent
    async with db.connection() as conn:  # the refused batch left nothing behind
        row = await store.session_row(conn, agent_id, "shared")
    assert row is not None and row["span_count"] == 3
    [(stored,)] = sql(database_url, "SELECT count(*) FROM spans WHERE agent_id = %s", (agent_id,))
    assert stored == 3

    again = await ingest(second, exact=True)
    assert (again.stored, again.refused, again.refused_sessions) == (2, 1, ["shared"])
    async with db.connection() as conn:
        row = await store.session_row(conn, agent_id, "shared")
    assert row is not None
    assert (row["span_count"], row["rejected_spans"], row["truncated"]) == (5, 1, True)
    assert row["bytes"] <= cap
