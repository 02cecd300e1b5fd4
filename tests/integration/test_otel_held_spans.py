"""Spans of a trace whose root span has not come are held on the trace, not on a session:
when the root comes they move to its session with their times, and while they wait they
count against the size cap on their own. ``store.copy_batch`` on the real PostgreSQL."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from evalkit.db import Database
from evalkit.otel.otlp import Incoming, decode_protobuf
from evalkit.store import otel as store
from tests.integration.db_helpers import sql
from tests.integration.test_otel_agent_hold import NAMES, NOW, START, agent, workspace

TRACE = bytes([7]) * 16
ROOT = bytes([7]) * 8
MS = 1_000_000
"""Span times in whole milliseconds, so that a stored timestamp (microseconds) is exact."""


def spans(*made: tuple[int, bool, int, int]) -> list[Incoming]:
    """Spans of one trace: (number, is the root, start and end in ms after START); the root
    carries ``session.id`` "late", the other spans are its children."""
    body = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                scope_spans=[
                    ScopeSpans(
                        spans=[
                            Span(
                                trace_id=TRACE,
                                span_id=ROOT if root else bytes([7]) * 7 + bytes([number]),
                                parent_span_id=b"" if root else ROOT,
                                name=f"span {number}",
                                start_time_unix_nano=START + start * MS,
                                end_time_unix_nano=START + end * MS,
                                attributes=[
                                    KeyValue(key="session.id", value=AnyValue(string_value="late"))
                                ]
                                if root
                                else [],
                            )
                            for number, root, start, end in made
                        ]
                    )
                ]
            )
        ]
    ).SerializeToString()
    return decode_protobuf(body).spans


@pytest.fixture
async def agent_id(db: Database, database_url: str) -> int:
    """An agent, and today's span partition."""
    async with db.connection() as conn:
        await store.ensure_partition(conn, NOW.date())
    return agent(database_url, workspace(database_url), "bot")


async def ingest(
    db: Database, agent_id: int, batch: list[Incoming], cap: int
) -> store.IngestResult:
    async with db.pipelined_transaction() as conn:
        copied = await store.copy_batch(
            conn, agent_id, batch, session_names=NAMES, max_session_bytes=cap, received_at=NOW
        )
        await copied.write_back(conn, commit=True)
    return copied.result


async def test_a_late_root_brings_its_held_spans_times_to_the_session(
    db: Database, database_url: str, agent_id: int
) -> None:
    # held over two batches; the second child ends after the root (work it did not wait for)
    first, second = spans((1, False, 10, 20)), spans((2, False, 30, 5000))
    children = first + second
    root = spans((0, True, 0, 1000))

    for batch in (first, second):
        held = await ingest(db, agent_id, batch, 10_000_000)
        assert (held.stored, held.touched) == (1, [])
    late = await ingest(db, agent_id, root, 10_000_000)
    assert (late.stored, late.touched) == (1, ["late"])

    async with db.connection() as conn:
        session = await store.session_row(conn, agent_id, "late")
    assert session is not None
    assert session["span_count"] == 3
    assert session["bytes"] == sum(s.size for s in children + root)
    assert session["first_span_at"] == store.ns_to_datetime(START)
    assert session["last_span_at"] == store.ns_to_datetime(START + 5000 * MS)
    [(pending_spans, pending_bytes)] = sql(
        database_url, "SELECT pending_spans, pending_bytes FROM trace_sessions"
    )
    assert (pending_spans, pending_bytes) == (0, 0)


async def test_held_spans_past_the_cap_are_refused_and_named_as_waiting_for_their_root(
    db: Database, database_url: str, agent_id: int
) -> None:
    children = spans((1, False, 10, 20), (2, False, 30, 40), (3, False, 50, 60))
    cap = children[0].size + children[1].size  # the third does not fit

    result = await ingest(db, agent_id, children, cap)

    assert (result.stored, result.refused) == (2, 1)
    assert result.refused_sessions == ["(traces whose root span has not arrived)"]
    assert result.touched == []
    [(pending_spans, pending_bytes)] = sql(
        database_url, "SELECT pending_spans, pending_bytes FROM trace_sessions"
    )
    assert (pending_spans, pending_bytes) == (2, cap)
