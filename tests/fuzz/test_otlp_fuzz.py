"""Hypothesis fuzz of the OTLP decoder (``evalkit.otel.otlp``): random bytes, mutated valid
protobuf, OTLP/JSON with values of the wrong type, bad hex ids, and huge repeated fields.

Whatever comes in, the decoder either decodes it or raises its own ``NotTraces`` with a
message; it never raises anything else and never takes long. What it decodes keeps the
promises the collector's store relies on (id lengths, times that fit a bigint, text without
NUL) and reads back as the shared ``Span`` contract.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import msgspec
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

import evalkit.store.otel as store
from evalkit.otel.otlp import (
    INT64_MAX,
    Decoded,
    NotTraces,
    _native_spans,
    any_value,
    decode_json,
    decode_protobuf,
    native,
    received_encodings,
    spans_of,
)
from evalkit.otel.otlp import span_from_row as read_back
from tests.fuzz.conftest import examples

SECONDS = 10.0
"""Longest one decode of a fuzzed body (at most a few hundred kB) may take on a loaded
two-core machine; a hang or a blow-up takes far longer."""


def decode(kind: str, body: bytes) -> Decoded | None:
    """Decode and check the outcome: a Decoded that keeps its promises, or NotTraces."""
    started = time.monotonic()
    try:
        decoded = decode_protobuf(body) if kind == "protobuf" else decode_json(body)
    except NotTraces as exc:
        assert str(exc).strip(), "NotTraces without a message"
        return None
    finally:
        assert time.monotonic() - started < SECONDS, f"decoding {len(body)} bytes took too long"
    check(decoded)
    if kind == "protobuf":
        assert_as_python_reads_it(body, decoded)
    return decoded


def assert_as_python_reads_it(body: bytes, decoded: Decoded) -> None:
    """The C pass (evalkit/otel/_native.c), which decode_protobuf takes where it follows the
    layout, gives what the Python pass gives from protobuf's own parse."""
    request = ExportTraceServiceRequest.FromString(body)
    python = spans_of(request, received_encodings(body, request))
    assert repr(decoded.spans) == repr(python.spans)  # repr: NaN attributes compare unequal
    counts = (decoded.bad_ids, decoded.bad_times, decoded.bad_codes)
    assert counts == (python.bad_ids, python.bad_times, python.bad_codes)


def check(decoded: Decoded) -> None:
    assert decoded.bad_ids >= 0 and decoded.bad_times >= 0
    resources: dict[bytes, dict[str, Any]] = {}
    for span in decoded.spans:
        assert len(span.trace_id) == 16 and span.trace_id != bytes(16)
        assert len(span.span_id) == 8 and span.span_id != bytes(8)
        assert span.parent_span_id is None or len(span.parent_span_id) == 8
        assert span.parent_span_id != bytes(8)
        assert 0 <= span.start_ns <= INT64_MAX and 0 <= span.end_ns <= INT64_MAX
        for text in (span.name, span.status_message, span.scope):
            assert text is None or "\x00" not in text  # PostgreSQL text cannot hold it
        assert span.size >= len(span.body)
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
        msgspec.json.encode(read_back(row, resources))  # what the API answers for it


# --------------------------------------------------------------------------- protobuf


ids = st.one_of(
    st.binary(min_size=16, max_size=16),
    st.binary(min_size=8, max_size=8),
    st.just(b""),
    st.just(bytes(16)),
    st.just(bytes(8)),
    st.binary(max_size=20),
)


def valid_ids(size: int) -> st.SearchStrategy[bytes]:
    """Ids the collector keeps (not all zero: hypothesis leans to zero bytes)."""
    return st.binary(min_size=size, max_size=size).map(lambda b: b"\x01" + b[1:])


safe_texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
"""Text protobuf can encode (no lone surrogates); NUL included."""
enums = st.one_of(
    st.integers(0, 5), st.integers(-(2**31), 2**31 - 1), st.sampled_from([-(2**15), 2**15])
)
"""Kinds and status codes: OTLP's own, and any other an open enum carries."""
uint64 = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, INT64_MAX, INT64_MAX + 1]))


def any_values(depth: int = 3) -> st.SearchStrategy[AnyValue]:
    leaves = st.one_of(
        safe_texts.map(lambda s: AnyValue(string_value=s)),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
        st.floats().map(lambda f: AnyValue(double_value=f)),
        st.booleans().map(lambda b: AnyValue(bool_value=b)),
        st.binary(max_size=10).map(lambda b: AnyValue(bytes_value=b)),
        st.just(AnyValue()),
    )
    if depth == 0:
        return leaves
    inner = any_values(depth - 1)
    return st.one_of(
        leaves,
        st.lists(inner, max_size=3).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
        st.lists(st.tuples(safe_texts, inner), max_size=3).map(
            lambda kvs: AnyValue(
                kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs])
            )
        ),
    )


attributes = st.lists(
    st.builds(lambda k, v: KeyValue(key=k, value=v), safe_texts, any_values()), max_size=4
)
spans = st.builds(
    lambda t, s, p, n, k, a, b, attrs, status, msg: Span(
        trace_id=t,
        span_id=s,
        parent_span_id=p,
        name=n,
        kind=k,
        start_time_unix_nano=a,
        end_time_unix_nano=b,
        attributes=attrs,
        status=Status(code=status, message=msg) if status is not None else None,
    ),
    st.one_of(valid_ids(16), ids),
    st.one_of(valid_ids(8), ids),
    st.one_of(st.just(b""), valid_ids(8), ids),
    safe_texts,
    enums,
    st.one_of(st.integers(0, INT64_MAX), uint64),
    st.one_of(st.integers(0, INT64_MAX), uint64),
    attributes,
    st.one_of(st.none(), enums),
    safe_texts,
)
requests = st.builds(
    lambda groups: ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attrs),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name=scope), spans=group)
                    for scope, group in scopes
                ],
            )
            for attrs, scopes in groups
        ]
    ),
    st.lists(
        st.tuples(
            attributes, st.lists(st.tuples(safe_texts, st.lists(spans, max_size=4)), max_size=2)
        ),
        max_size=2,
    ),
)


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding with some bytes flipped, inserted, deleted, or cut off."""
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "duplicate"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[at:]
        elif op == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 32))]
    return bytes(data)


@settings(max_examples=examples(300))
@given(st.binary(max_size=2048))
def test_random_bytes_as_protobuf(body: bytes) -> None:
    decode("protobuf", body)


def test_the_c_pass_is_built() -> None:
    """The comparisons of this module would compare the Python pass with itself."""
    assert native is not None, (
        "evalkit/otel/_native.c is not compiled: `uv sync` compiles it with the machine's C "
        "compiler (hatch_build.py); see its warning"
    )


def good_ids(span: Span) -> bool:
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    return (
        len(trace_id) == 16
        and trace_id != bytes(16)
        and len(span_id) == 8
        and span_id != bytes(8)
        and len(parent) in (0, 8)
    )


@settings(max_examples=examples(100))
@given(requests)
def test_valid_protobuf_decodes(request: ExportTraceServiceRequest) -> None:
    body = request.SerializeToString()
    assert _native_spans(native, body, request) is not None  # it follows what protobuf writes
    decoded = decode("protobuf", body)
    spans = [sp for rs in request.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    if decoded is None:
        # Refused as a metrics or logs export (their field numbers overlap a trace
        # export's), which the decoder says only of a body where no span has good ids.
        assert not any(good_ids(sp) for sp in spans)
        return
    assert len(decoded.spans) + decoded.refused == len(spans)


@settings(max_examples=examples(200))
@given(mutated(requests.map(lambda r: r.SerializeToString())))
def test_mutated_protobuf(body: bytes) -> None:
    decode("protobuf", body)


@settings(max_examples=examples(150))
@given(st.binary(min_size=1, max_size=20), st.sampled_from(["name", "status", "scope"]))
def test_protobuf_text_fields_with_any_bytes(raw: bytes, where: str) -> None:
    """A sender's encoder may put any bytes in a string field (invalid UTF-8, NUL): the
    decoder refuses the body or keeps text PostgreSQL can hold. The bytes replace a
    placeholder of the same length, so the framing stays valid."""
    placeholder = "\x7f" * len(raw)
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    scope = InstrumentationScope()
    if where == "name":
        span.name = placeholder
    elif where == "status":
        span.status.CopyFrom(Status(code=2, message=placeholder))
    else:
        scope.name = placeholder
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(scope=scope, spans=[span])])]
    ).SerializeToString()
    decode("protobuf", body.replace(placeholder.encode(), raw))


# --------------------------------------------------------------------------- JSON

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=10,
)
hex_ids = st.one_of(
    st.text("0123456789abcdef", min_size=32, max_size=32),
    st.text("0123456789abcdef", min_size=16, max_size=16),
    st.text("0123456789abcdefABCDEF", max_size=34),
    st.text(max_size=34),  # not hex at all
    st.just("0" * 32),
)


def otlp_json(request: ExportTraceServiceRequest) -> Any:
    """The OTLP/JSON form of ``request``: camelCase keys, hex ids, 64-bit ints as strings."""
    data = json_format.MessageToDict(request)
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return data


@st.composite
def json_mutated(draw: st.DrawFn) -> bytes:
    """A valid OTLP/JSON export with a subtree replaced by any JSON value or a bad id."""
    data = otlp_json(draw(requests))
    for _ in range(draw(st.integers(1, 3))):
        node, key = None, None
        current: Any = data
        while isinstance(current, dict | list) and current and draw(st.booleans()):
            node = current
            key = draw(
                st.sampled_from(list(current) if isinstance(current, dict) else range(len(current)))
            )
            current = node[key]
        replacement = draw(st.one_of(json_values, hex_ids))
        if node is None:
            data = replacement
        else:
            node[key] = replacement
    return msgspec.json.encode(data)


@settings(max_examples=examples(300))
@given(st.binary(max_size=2048))
def test_random_bytes_as_json(body: bytes) -> None:
    decode("json", body)


@settings(max_examples=examples(200))
@given(json_values)
def test_any_json_value(value: Any) -> None:
    decode("json", msgspec.json.encode(value))


@settings(max_examples=examples(100))
@given(requests)
def test_valid_json_decodes(request: ExportTraceServiceRequest) -> None:
    decoded = decode("json", msgspec.json.encode(otlp_json(request)))
    assert decoded is not None
    total = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    assert len(decoded.spans) + decoded.refused == total


@settings(max_examples=examples(200))
@given(json_mutated())
def test_mutated_json(body: bytes) -> None:
    decode("json", body)


@settings(max_examples=examples(200))
@given(hex_ids, hex_ids, hex_ids)
def test_json_hex_ids(trace_id: str, span_id: str, parent: str) -> None:
    span = {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": "s"}
    link = {"traceId": parent, "spanId": span_id}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{**span, "links": [link]}]}]}]}
    decoded = decode("json", msgspec.json.encode(body))
    assert decoded is not None and len(decoded.spans) + decoded.refused == 1


# --------------------------------------------------------------------------- size


def test_huge_repeated_fields_decode_in_bounded_time() -> None:
    """Many spans, many attributes on one span, many empty groups: linear, not worse."""
    trace, ok = b"\x01" * 16, b"\x02" * 8
    many_attributes = Span(
        trace_id=trace,
        span_id=ok,
        attributes=[KeyValue(key=f"k{i}", value=AnyValue(int_value=i)) for i in range(30_000)],
    )
    many_spans = [
        Span(trace_id=trace, span_id=i.to_bytes(8, "big"), name="s") for i in range(1, 10_001)
    ]
    bodies = {
        "attributes": [many_attributes],
        "spans": many_spans,
        "bad ids": [Span(trace_id=b"x", span_id=b"y")] * 20_000,
    }
    for what, group in bodies.items():
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=group)])]
        )
        for kind, body in (
            ("protobuf", request.SerializeToString()),
            ("json", msgspec.json.encode(otlp_json(request))),
        ):
            started = time.monotonic()
            decoded = decode(kind, body)
            assert decoded is not None, (what, kind)
            assert len(decoded.spans) + decoded.refused == len(group), (what, kind)
            assert time.monotonic() - started < 60, (what, kind)
    empty_groups = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans()] * 100)] * 1000
    )
    assert decode("protobuf", empty_groups.SerializeToString()) is not None


# --------------------------------------------------------------------------- session attributes

SESSION_NAMES = ["session.id", "gen_ai.conversation.id"]
session_keys = st.one_of(st.sampled_from(SESSION_NAMES), safe_texts)
spans_with_sessions = st.builds(
    lambda kvs: Span(attributes=[KeyValue(key=k, value=v) for k, v in kvs]),
    st.lists(st.tuples(session_keys, any_values(1)), max_size=6),
)


def assert_session_attributes_as_protobuf_reads_them(body: bytes) -> None:
    try:
        span = Span.FromString(body)
    except DecodeError:
        return  # the collector reads the attributes of spans protobuf has parsed only
    expected = {kv.key: any_value(kv.value) for kv in span.attributes if kv.key in SESSION_NAMES}
    assert repr(store._span_attributes(body, SESSION_NAMES)) == repr(expected)  # NaN
    found = native.attributes(body, SESSION_NAMES)
    assert found is None or set(found) == set(expected)


@settings(max_examples=examples(200))
@given(spans_with_sessions)
def test_session_attributes_read_in_c(span: Span) -> None:
    body = span.SerializeToString()
    assert native.attributes(body, SESSION_NAMES) is not None  # what protobuf writes
    assert_session_attributes_as_protobuf_reads_them(body)


@settings(max_examples=examples(200))
@given(mutated(spans_with_sessions.map(lambda s: s.SerializeToString())))
def test_session_attributes_of_mutated_spans(body: bytes) -> None:
    assert_session_attributes_as_protobuf_reads_them(body)
