"""OTLP decoding without a server: the JSON id pitfall, values, refusals, the Status body."""

from __future__ import annotations

import base64
import re

import msgspec
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from evalkit.edge.routes.otel import status_protobuf
from evalkit.otel.otlp import NotTraces, decode_json, decode_protobuf, span_from_row

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


def request(**span: object) -> dict:
    base = {"traceId": TRACE, "spanId": SPAN, "name": "agent", "startTimeUnixNano": "5"}
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [{"scope": {"name": "lib"}, "spans": [{**base, **span}]}],
            }
        ]
    }


def test_json_ids_are_hex_not_base64():
    [span] = decode_json(msgspec.json.encode(request())).spans
    assert span.trace_id.hex() == TRACE and span.span_id.hex() == SPAN
    assert span.start_ns == 5 and span.parent_span_id is None


def test_json_values_read_back():
    attrs = [
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "i", "value": {"intValue": "42"}},
        {"key": "d", "value": {"doubleValue": 0.5}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "raw", "value": {"bytesValue": base64.b64encode(b"\x00\x01").decode()}},
        {
            "key": "list",
            "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "y"}]}},
        },
        {
            "key": "map",
            "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}},
        },
    ]
    events = [{"name": "e", "timeUnixNano": "7", "attributes": attrs[:1]}]
    body = request(attributes=attrs, kind=3, events=events, parentSpanId="01" * 8)
    [span] = decode_json(msgspec.json.encode(body)).spans
    row = {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "name": span.name,
        "kind": span.kind,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "status_code": span.status_code,
        "status_message": span.status_message,
        "scope": span.scope,
        "body": span.body,
        "resource": span.resource_body,
    }
    read = span_from_row(row, {})
    assert read.attributes == {
        "s": "x",
        "i": 42,
        "d": 0.5,
        "b": True,
        "raw": "AAE=",
        "list": [1, "y"],
        "map": {"k": False},
    }
    assert read.resource == {"service.name": "a"} and read.scope == "lib"
    assert (read.kind, read.parent_span_id, read.trace_id) == (3, "01" * 8, TRACE)
    assert [(e.name, e.time_ns, e.attributes) for e in read.events] == [("e", 7, {"s": "x"})]


def test_bad_ids_are_counted_not_fatal():
    decoded = decode_json(msgspec.json.encode(request(traceId="zz")))
    assert decoded.spans == [] and decoded.bad_ids == 1
    decoded = decode_json(msgspec.json.encode(request(spanId="00" * 8)))
    assert decoded.bad_ids == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1]", "expected a JSON object with resourceSpans"),
        (b'{"resourceLogs": []}', "this is an OTLP logs export"),
        (b'{"resourceMetrics": []}', "this is an OTLP metrics export"),
        (b'{"spans": []}', "no resourceSpans key (found: spans)"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}',
            "not a valid",
        ),
    ],
)
def test_json_refusals(body, message):
    with pytest.raises(NotTraces, match=re.escape(message)):
        decode_json(body)


def test_protobuf_round_trip_and_garbage():
    from google.protobuf import json_format

    data = request()
    span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["traceId"] = base64.b64encode(bytes.fromhex(TRACE)).decode()
    span["spanId"] = base64.b64encode(bytes.fromhex(SPAN)).decode()
    message = json_format.ParseDict(data, ExportTraceServiceRequest())
    [decoded] = decode_protobuf(message.SerializeToString()).spans
    assert decoded.trace_id.hex() == TRACE
    with pytest.raises(NotTraces, match="not a protobuf OTLP trace export"):
        decode_protobuf(b"\xff\xff\xff")


def test_status_body():
    assert status_protobuf(14, "down") == b"\x08\x0e\x12\x04down"
    assert status_protobuf(3, "x" * 200)[:4] == b"\x08\x03\x12\xc8"


# Protobuf written by hand: a field's tag, and a length-delimited field.
def _tag(field: int, wire_type: int) -> bytes:
    return bytes([field << 3 | wire_type])


def _ld(field: int, payload: bytes) -> bytes:
    assert len(payload) < 0x80 or len(payload) < 0x4000
    length = len(payload)
    encoded = bytes([length]) if length < 0x80 else bytes([length & 0x7F | 0x80, length >> 7])
    return _tag(field, 2) + encoded + payload


def _span(span_id: bytes, name: bytes) -> bytes:
    """A span with its fields in an order protobuf never writes (name before the ids) and
    a field number it does not know (99 is past every Span field): serializing it again
    gives other bytes."""
    unknown = bytes([0x98, 0x06, 0x07])  # field 99, varint 7
    return _ld(5, name) + unknown + _ld(2, span_id) + _ld(1, bytes.fromhex(TRACE))


def _export(scopes_of_resources: list[list[list[bytes]]], scope_extra: bytes = b"") -> bytes:
    resources = b""
    for scopes in scopes_of_resources:
        resource = _ld(1, _ld(1, _ld(1, b"service.name") + _ld(2, _ld(1, b"svc"))))
        for spans in scopes:
            resource += _ld(
                2, _ld(1, _ld(1, b"lib")) + b"".join(_ld(2, s) for s in spans) + scope_extra
            )
        resources += _ld(1, resource)
    return resources


def test_protobuf_spans_are_stored_as_the_sender_encoded_them():
    first, second, third = (_span(bytes([i]) * 8, f"s{i}".encode()) for i in (1, 2, 3))
    refused = _span(bytes(8), b"zero id")
    body = _export([[[first], [refused, second]], [[third]]])
    decoded = decode_protobuf(body)
    assert decoded.bad_ids == 1
    # The refused span in between does not shift which bytes go with which span.
    assert [(s.name, s.body) for s in decoded.spans] == [
        ("s1", first),
        ("s2", second),
        ("s3", third),
    ]
    # what serializing would have stored
    assert ProtoSpan.FromString(first).SerializeToString() != first


def test_a_layout_the_walk_does_not_follow_is_serialized_again():
    span = _span(b"\x01" * 8, b"s1")
    group = _tag(9, 3) + _tag(9, 4)  # an (empty) group: a wire type the walk does not follow
    decoded = decode_protobuf(_export([[[span]]], scope_extra=group))
    [stored] = decoded.spans
    assert stored.name == "s1" and stored.body == ProtoSpan.FromString(span).SerializeToString()
    assert stored.body != span
