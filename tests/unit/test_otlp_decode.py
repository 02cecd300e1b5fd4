"""OTLP decoding without a server: the JSON id pitfall, values, refusals, the Status body."""

from __future__ import annotations

import base64
import re

import msgspec
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

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
