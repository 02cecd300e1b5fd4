"""OTLP trace requests (protobuf or JSON) decoded into spans ready to store.

The collector stores what the sender said, byte for byte: each span as its OTLP protobuf
encoding (attributes, events, links, everything) and its resource likewise; a JSON export
is stored in the same protobuf form. Only the columns the server sorts, groups and shows
by (ids, parent, name, kind, times, status) are read out at ingest; the rest is turned into
plain JSON values (OTLP ``AnyValue`` becomes str, bool, int, float, list or dict; bytes
become base64 text) when a span is read back. The decoder refuses a body that is not a
trace export, and names what it is when it is a logs or metrics export sent to the traces
URL.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

import msgspec
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from evalkit.otel.model import Span, SpanEvent

native: ModuleType | None
"""The per-span work compiled (evalkit/otel/_native.c), or None: evalkit was built without
a C compiler, and the same work runs in Python."""
try:
    from evalkit.otel import _native as native
except ImportError:
    native = None

INT64_MAX = 2**63 - 1
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
ZERO_TRACE = bytes(16)
ZERO_SPAN = bytes(8)
SPAN_OVERHEAD = 64
"""Bytes a span counts for beyond its encoding and name (ids, times, row header)."""


class NotTraces(ValueError):
    """The body is not an OTLP trace export; the message says what it is instead."""


@dataclass(slots=True)
class Incoming:
    """One decoded span: the columns read out, and its stored protobuf bytes. The C pass
    (evalkit/otel/_native.c) makes these too, writing the fields by name into their slots:
    keep them slots, with no logic in ``__init__``."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str | None
    body: bytes
    """The span's protobuf encoding (``opentelemetry.proto.trace.v1.Span``), as received."""
    size: int
    """What the span counts against ``otel.max_session_bytes``: its encoding, its name and
    ``SPAN_OVERHEAD``."""
    resource_body: bytes
    """Its resource's protobuf encoding, shared by the spans of one ResourceSpans."""
    scope: str | None
    resource: dict[str, Any]


@dataclass(slots=True)
class Decoded:
    spans: list[Incoming] = field(default_factory=list)
    bad_ids: int = 0
    """Spans refused for a trace id that is not 16 bytes, a span id not 8, or all zeros."""
    bad_times: int = 0
    """Spans refused for a start or end time past what a signed 64-bit integer holds."""
    bad_codes: int = 0
    """Spans refused for a kind or status code past what the 16-bit columns hold (OTLP's
    own values are 0 to 5 and 0 to 2)."""

    @property
    def refused(self) -> int:
        return self.bad_ids + self.bad_times + self.bad_codes


# --------------------------------------------------------------------------- batches


class TraceGroup(NamedTuple):
    """One trace's spans of a batch."""

    trace_id: bytes
    spans: list[Incoming]
    """In the batch's order."""
    first_ns: int
    """The earliest start among them."""
    last_ns: int
    """The latest end among them."""
    size: int
    """The bytes they count against their session (each span's ``size``)."""
    root: Incoming | None
    """The earliest span without a parent (by start, then span id), when one is here."""


def group_by_trace(spans: list[Incoming]) -> tuple[list[TraceGroup], bool]:
    """The spans grouped by trace, in the order each trace first comes, and whether any span
    (its trace id and span id) comes more than once. A trace's root is its earliest span
    without a parent (by start time, then span id), or None when none is here. Done in C
    where evalkit was built with it."""
    if native is not None:
        found: tuple[list[TraceGroup], bool] = native.traces(spans, TraceGroup)
        return found
    return group_in_python(spans)


def group_in_python(spans: list[Incoming]) -> tuple[list[TraceGroup], bool]:
    """:func:`group_by_trace` without the C pass: the reference the tests hold it to."""
    by_trace: dict[bytes, list[Incoming]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    groups = []
    for trace_id, group in by_trace.items():
        roots = [s for s in group if s.parent_span_id is None]
        root = min(roots, key=lambda s: (s.start_ns, s.span_id)) if roots else None
        first_ns = min(s.start_ns for s in group)
        last_ns = max(s.end_ns for s in group)
        groups.append(
            TraceGroup(trace_id, group, first_ns, last_ns, sum(s.size for s in group), root)
        )
    twice = len({s.trace_id + s.span_id for s in spans}) != len(spans)
    return groups, twice


# --------------------------------------------------------------------------- values


def any_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "double_value":
        return v.double_value
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return None


def attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:  # the hot loop of decoding: strings and ints inline
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            out[kv.key] = value.string_value
        elif kind == "int_value":
            out[kv.key] = value.int_value
        else:
            out[kv.key] = any_value(value)
    return out


def _text(value: str) -> str:
    """PostgreSQL text holds no NUL character; U+FFFD stands in for one."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


# --------------------------------------------------------------------------- decoding


def decode_protobuf(body: bytes) -> Decoded:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise NotTraces(
            f"the body is not a protobuf OTLP trace export (ExportTraceServiceRequest): {exc}"
        ) from None
    decoded = _native_spans(native, body, request) if native is not None else None
    if decoded is None:
        decoded = spans_of(request, received_encodings(body, request))
    if decoded.bad_ids and not decoded.spans:
        _refuse_other_signals(body)
    return decoded


def _refuse_other_signals(body: bytes) -> None:
    """Protobuf decodes a logs or metrics export as a trace export whose spans have no valid
    ids (the field numbers overlap); tell the sender what they sent instead."""
    try:
        metrics = ExportMetricsServiceRequest.FromString(body)
    except DecodeError:
        metrics = None
    if metrics is not None and any(
        m.name and m.WhichOneof("data")
        for rm in metrics.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    ):
        raise NotTraces(_other_signal("metrics", "ExportMetricsServiceRequest"))
    try:
        logs = ExportLogsServiceRequest.FromString(body)
    except DecodeError:
        logs = None
    if logs is not None and any(
        (r.time_unix_nano or r.observed_time_unix_nano)
        and (r.severity_number or r.severity_text or r.HasField("body"))
        for rl in logs.resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
    ):
        raise NotTraces(_other_signal("logs", "ExportLogsServiceRequest"))


def _other_signal(signal: str, message: str) -> str:
    return (
        f"this is an OTLP {signal} export ({message}), sent to the traces URL; evalkit's "
        f"collector takes traces only: point only the traces exporter at it "
        f"(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), not the {signal} one"
    )


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_to_base64(span: dict[str, Any]) -> None:
    """OTLP/JSON writes ids as hex; protobuf's JSON parser reads bytes as base64 (and would
    silently turn a hex id into a wrong one). An id that is not hex becomes empty, so the
    span is refused for a bad id instead of the whole request."""
    for key in _ID_KEYS:
        value = span.get(key)
        if isinstance(value, str):
            try:
                span[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                span[key] = ""


def decode_json(body: bytes) -> Decoded:
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise NotTraces(f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # msgspec's guard against running out of stack
        raise NotTraces(
            "the body's JSON is nested deeper than any OTLP trace export (arrays and objects "
            "inside one another hundreds of levels deep)"
        ) from None
    if not isinstance(data, dict):
        raise NotTraces(
            "the body is not an OTLP trace export: expected a JSON object with resourceSpans"
        )
    for key, signal, message in (
        ("resourceLogs", "logs", "ExportLogsServiceRequest"),
        ("resource_logs", "logs", "ExportLogsServiceRequest"),
        ("resourceMetrics", "metrics", "ExportMetricsServiceRequest"),
        ("resource_metrics", "metrics", "ExportMetricsServiceRequest"),
    ):
        if key in data:
            raise NotTraces(_other_signal(signal, message))
    if data and "resourceSpans" not in data and "resource_spans" not in data:
        keys = ", ".join(sorted(data)[:5])
        raise NotTraces(
            f"the body is not an OTLP trace export: no resourceSpans key (found: {keys})"
        )
    try:
        for rs in data.get("resourceSpans") or data.get("resource_spans") or []:
            for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
                for span in ss.get("spans") or []:
                    _hex_ids_to_base64(span)
                    for link in span.get("links") or []:
                        _hex_ids_to_base64(link)
        request = json_format.ParseDict(
            data, ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
    except (json_format.ParseError, AttributeError, TypeError) as exc:
        raise NotTraces(f"the body is not a valid OTLP/JSON trace export: {exc}") from None
    return spans_of(request)


class _Unplain(ValueError):
    """The body's layout is one the span slicer does not follow (a group, a cut field)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise _Unplain("a varint runs past the end")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _length_fields(buf: bytes, start: int, end: int, wanted: int) -> list[tuple[int, int]]:
    """Where each length-delimited field number ``wanted`` of the message in
    ``buf[start:end]`` lies, in wire order (repeated fields parse in that order)."""
    found = []
    i = start
    while i < end:
        tag = buf[i]  # one byte for field numbers under 16, as these are; else the varint
        if tag < 0x80:
            i += 1
        else:
            tag, i = _varint(buf, i)
        wire_type = tag & 7
        if wire_type == 2:
            length, i = _varint(buf, i)
            if tag >> 3 == wanted:
                found.append((i, i + length))
            i += length
        elif wire_type == 0:
            _, i = _varint(buf, i)
        elif wire_type == 1:
            i += 8
        elif wire_type == 5:
            i += 4
        else:
            raise _Unplain(f"wire type {wire_type}")
    if i != end:
        raise _Unplain("a field runs past its message")
    return found


def received_encodings(body: bytes, request: ExportTraceServiceRequest) -> list[bytes] | None:
    """Each span's bytes as the sender encoded them, in the order protobuf parsed the spans
    (``ExportTraceServiceRequest.resource_spans[].scope_spans[].spans[]``, fields 1, 2
    and 2): stored as received, without serializing each span again. None when the body's
    layout is one this walk does not follow; the spans are then serialized again."""
    try:
        slices = [
            body[span_start:span_end]
            for rs_start, rs_end in _length_fields(body, 0, len(body), 1)
            for ss_start, ss_end in _length_fields(body, rs_start, rs_end, 2)
            for span_start, span_end in _length_fields(body, ss_start, ss_end, 2)
        ]
    except _Unplain:
        return None
    parsed = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    return slices if len(slices) == parsed else None


def _hex(value: bytes) -> str:
    return binascii.hexlify(value).decode()


def spans_of(request: ExportTraceServiceRequest, encodings: list[bytes] | None = None) -> Decoded:
    """The request's spans, each checked and read out (the per-span loop of every export:
    positional construction and no helper calls, as it runs for every span received).
    ``encodings``, when given, are the spans' bytes as received, one per span in order."""
    decoded = Decoded()
    out = decoded.spans
    append = out.append
    received = iter(encodings) if encodings is not None else None
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        resource_body = rs.resource.SerializeToString()
        for ss in rs.scope_spans:
            scope = _text(ss.scope.name) if ss.scope.name else None
            for sp in ss.spans:
                encoding = next(received) if received is not None else None
                trace_id, span_id, parent = sp.trace_id, sp.span_id, sp.parent_span_id
                if (
                    len(trace_id) != 16
                    or len(span_id) != 8
                    or trace_id == ZERO_TRACE
                    or span_id == ZERO_SPAN
                    or (parent and len(parent) != 8)
                ):
                    decoded.bad_ids += 1
                    continue
                start, end = sp.start_time_unix_nano, sp.end_time_unix_nano
                if start > INT64_MAX or end > INT64_MAX:
                    decoded.bad_times += 1
                    continue
                code, message = 0, None
                if sp.HasField("status"):
                    status = sp.status
                    code = status.code
                    message = _text(status.message) if status.message else None
                kind = sp.kind
                if not (INT16_MIN <= kind <= INT16_MAX and INT16_MIN <= code <= INT16_MAX):
                    decoded.bad_codes += 1
                    continue
                name = sp.name
                if "\x00" in name:
                    name = _text(name)
                body = encoding if encoding is not None else sp.SerializeToString()
                append(
                    Incoming(
                        trace_id,
                        span_id,
                        parent if parent and parent != ZERO_SPAN else None,
                        name,
                        kind,
                        start,
                        end,
                        code,
                        message,
                        body,
                        len(body) + len(name) + SPAN_OVERHEAD,
                        resource_body,
                        scope,
                        resource,
                    )
                )
    return decoded


def _native_spans(
    native: ModuleType, body: bytes, request: ExportTraceServiceRequest
) -> Decoded | None:
    """What :func:`spans_of` returns, the per-span work done in C (:mod:`evalkit.otel._native`
    reads the spans out of the bytes protobuf has parsed); None when the C pass does not
    follow the body's layout, or finds other spans than protobuf did."""
    groups = []
    for rs in request.resource_spans:
        resource_body = rs.resource.SerializeToString()
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope = _text(ss.scope.name) if ss.scope.name else None
            groups.append((len(ss.spans), resource_body, scope, resource))
    found = native.scan(body, Incoming, groups)
    return None if found is None else Decoded(*found)


def span_from_row(row: dict[str, Any], resources: dict[bytes, dict[str, Any]]) -> Span:
    """A stored span (a row of ``spans``) as the shared :class:`Span` contract.
    ``resources`` caches decoded resources across the rows of one read."""
    message = ProtoSpan.FromString(row["body"])
    resource_body = bytes(row["resource"])
    resource = resources.get(resource_body)
    if resource is None:
        resource = resources[resource_body] = attributes(
            Resource.FromString(resource_body).attributes
        )
    parent = row["parent_span_id"]
    return Span(
        trace_id=_hex(row["trace_id"]),
        span_id=_hex(row["span_id"]),
        parent_span_id=_hex(parent) if parent else None,
        name=row["name"],
        kind=row["kind"],
        start_ns=row["start_ns"],
        end_ns=row["end_ns"],
        attributes=attributes(message.attributes),
        events=[
            SpanEvent(name=e.name, time_ns=e.time_unix_nano, attributes=attributes(e.attributes))
            for e in message.events
        ],
        status_code=row["status_code"],
        status_message=row["status_message"],
        resource=resource,
        scope=row["scope"],
    )
