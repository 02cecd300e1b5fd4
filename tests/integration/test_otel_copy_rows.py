"""The spans' COPY rows made in C (evalkit/otel/_native.c) store what psycopg's own rows
store, column for column, in the real spans table: the two ways the collector writes."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

import evalkit.store.otel as store
from evalkit.otel.otlp import INT64_MAX, Incoming, decode_protobuf

RECEIVED_AT = datetime(2026, 12, 7, 1, 2, 3, 456789, tzinfo=UTC)
COLUMNS = (
    "received_at, trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, "
    "status_code, status_message, scope, body, resource, size"
)


def edge_values_body() -> bytes:
    """Spans at the edges of every column: no parent, a zero parent, NUL and non-ASCII text,
    no scope name, the largest times and 16-bit codes, an empty and a long body."""
    spans = [
        Span(trace_id=b"\x01" * 16, span_id=b"\x01" * 8, name="root", kind=1),
        Span(
            trace_id=b"\x01" * 16,
            span_id=b"\x02" * 8,
            parent_span_id=b"\x01" * 8,
            name="naïve\x00name ☃ 🎉",
            kind=-(2**15),
            start_time_unix_nano=INT64_MAX,
            end_time_unix_nano=INT64_MAX,
            status=Status(code=2**15 - 1, message="went\x00wrong ✗"),
            attributes=[KeyValue(key="k", value=AnyValue(string_value="v" * 5000))],
        ),
        Span(
            trace_id=b"\x02" * 16,
            span_id=b"\x03" * 8,
            parent_span_id=bytes(8),
            status=Status(code=1),
        ),
    ]
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[KeyValue(key="service.name", value=AnyValue(string_value="é"))]
                ),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name="lib ✓"), spans=spans[:2]),
                    ScopeSpans(spans=spans[2:]),
                ],
            )
        ]
    ).SerializeToString()


async def stored_rows(db, agent_id: int) -> list[dict]:
    async with db.connection() as conn:
        cursor = await conn.raw.execute(
            f"SELECT {COLUMNS} FROM spans WHERE agent_id = %s ORDER BY span_id", [agent_id]
        )
        return await cursor.fetchall()


async def test_rows_made_in_c_store_what_psycopg_stores(db, monkeypatch):
    assert store.native is not None, "evalkit/otel/_native.c is not compiled (hatch_build.py)"
    spans = decode_protobuf(edge_values_body()).spans
    assert len(spans) == 3
    async with db.transaction() as conn:
        await store.ensure_partition(conn, RECEIVED_AT.date())
        await store._copy_spans(conn, 1, spans, RECEIVED_AT)
    monkeypatch.setattr(store, "native", None)  # psycopg formats the rows
    async with db.transaction() as conn:
        await store._copy_spans(conn, 2, spans, RECEIVED_AT)
    in_c, by_psycopg = await stored_rows(db, 1), await stored_rows(db, 2)
    assert len(in_c) == 3 and in_c == by_psycopg
    root, child, other = in_c
    assert root["received_at"] == RECEIVED_AT and root["scope"] == "lib ✓"
    assert child["name"] == "naïve\ufffdname ☃ 🎉"
    assert child["status_message"] == "went\ufffdwrong ✗" and child["kind"] == -(2**15)
    assert other["parent_span_id"] is None and other["scope"] is None


@pytest.mark.parametrize("column", ["kind", "status_code"])
def test_a_code_past_16_bits_refuses_its_span_only(column):
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x01" * 8)
    if column == "kind":
        span.kind = 2**15
    else:
        span.status.code = -(2**15) - 1
    fine = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, kind=3)
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span, fine])])]
    ).SerializeToString()
    decoded = decode_protobuf(body)
    assert decoded.bad_codes == 1 and [s.kind for s in decoded.spans] == [3]


def test_rows_of_objects_without_slots_are_the_same():
    """copy_rows reads Incoming's slots directly, and any other object's columns by name."""
    spans = decode_protobuf(edge_values_body()).spans
    plain = [SimpleNamespace(**{f: getattr(s, f) for f in Incoming.__slots__}) for s in spans]
    assert store.native is not None
    assert store.native.copy_rows(plain, 7, 1) == store.native.copy_rows(spans, 7, 1)
    with pytest.raises(AttributeError):
        store.native.copy_rows([SimpleNamespace(trace_id=b"\x01" * 16)], 7, 1)
