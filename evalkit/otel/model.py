"""A span as evalkit stores it and reads it back: the contract between the collector
(which decodes OTLP and stores spans) and the trajectory builder (which reads them with an
agent's span mapping). Values are plain JSON: OTLP ``AnyValue`` becomes str, bool, int,
float, list or dict; bytes become base64 text."""

from __future__ import annotations

from typing import Any

import msgspec


class SpanEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
    name: str
    time_ns: int
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)


class Span(msgspec.Struct, kw_only=True, omit_defaults=True):
    trace_id: str
    """32 lower-case hex digits."""
    span_id: str
    """16 lower-case hex digits."""
    parent_span_id: str | None = None
    name: str
    kind: int = 0
    """OTLP SpanKind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer."""
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    events: list[SpanEvent] = msgspec.field(default_factory=list)
    status_code: int = 0
    """0 unset, 1 ok, 2 error."""
    status_message: str | None = None
    resource: dict[str, Any] = msgspec.field(default_factory=dict)
    """The resource's attributes (service.name, ...)."""
    scope: str | None = None
    """The instrumentation scope's name."""


def session_attribute_names(mapping: dict[str, Any]) -> list[str]:
    """The attribute names a mapping says hold the session id (``session_id``: a name or a
    list of names, looked up in the span's attributes, then its resource's)."""
    rule = mapping.get("session_id")
    if isinstance(rule, str):
        return [rule]
    if isinstance(rule, list):
        return [name for name in rule if isinstance(name, str)]
    return []


def session_id_of(span: Span, names: list[str]) -> str | None:
    for name in names:
        for source in (span.attributes, span.resource):
            value = source.get(name)
            if value not in (None, ""):
                return session_text(value)
    return None


def session_text(value: object) -> str:
    """A session attribute's value as the session id: text, with U+FFFD for any NUL
    (PostgreSQL text cannot hold one; the collector stores span names the same way)."""
    text = str(value)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def orphan_session_id(spans: list[Span], names: list[str]) -> str | None:
    """The session of a trace whose root span never arrived, read from the spans it has: the
    first session attribute found on its topmost spans (those whose parent is not among
    them), then on the others, each group by start time then span id; None when no span
    carries one."""
    ids = {span.span_id for span in spans}
    ordered = sorted(spans, key=lambda s: (s.parent_span_id in ids, s.start_ns, s.span_id))
    for span in ordered:
        found = session_id_of(span, names)
        if found is not None:
            return found
    return None
