"""Reading chat messages out of a span, in the three forms a mapping can name: indexed
attributes (OpenInference), a list of ``{role, parts}`` (OTel GenAI, JSON string or
structured, on the span or on an event), and one event per message (older GenAI).

Every reader returns plain :class:`Message` objects, or None when the span does not have
the source at all; problems reading a source that is there are reported through ``note``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalkit.otel.mapping import EventMessages, IndexedMessages, MessageSource, PartsMessages
from evalkit.otel.model import Span

Note = Callable[[str], None]


@dataclass
class Call:
    """A tool call an LLM asked for; ``arguments`` as found (object, JSON text, ...)."""

    id: str | None
    name: str | None
    arguments: Any
    where: str
    """The key the call was read from, for messages about it."""


@dataclass
class Result:
    """A tool's result as the next LLM call saw it."""

    call_id: str | None
    content: Any


@dataclass
class Message:
    role: str | None
    text: str | None = None
    reasoning: str | None = None
    calls: list[Call] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    where: str = ""
    """The key the message was read from (``llm.output_messages.0``)."""


def read(span: Span, sources: list[MessageSource], note: Note, *, output: bool) -> list[Message]:
    """The messages of the first source the span has; an empty list when it has none."""
    for source in sources:
        if isinstance(source, IndexedMessages):
            found = _indexed(span.attributes, source, note)
        elif isinstance(source, PartsMessages):
            found = _parts_source(span, source, note, output=output)
        else:
            found = _events(span, source, note)
        if found is not None:
            return found
    return []


def describe(sources: list[MessageSource]) -> str:
    """Where a mapping looks for messages, for the line saying none were found."""
    places = []
    for source in sources:
        if isinstance(source, IndexedMessages):
            places.append(f"{source.prefix}.<i>.*")
        elif isinstance(source, PartsMessages):
            event = f" or event {source.event}" if source.event else ""
            places.append(f"{source.attribute}{event}")
        else:
            places.append("events " + ", ".join(source.events))
    return "; ".join(places)


# --------------------------------------------------------------------------- text


def text_of(value: Any) -> str | None:
    """The text in a content value: a string, a list of parts, or an object holding text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        pieces = [t for t in (text_of(v) for v in value) if t]
        return "\n".join(pieces) if pieces else None
    if isinstance(value, dict):
        if value.get("type") not in (None, "text", "input_text", "output_text"):
            return None
        for key in ("text", "content", "value"):
            if key in value:
                return text_of(value[key])
        return None
    return json.dumps(value)


def decode_json(value: Any) -> tuple[Any, str | None]:
    """A JSON string decoded, anything else as it is; the error text when it does not parse."""
    if not isinstance(value, str):
        return value, None
    try:
        return json.loads(value), None
    except ValueError as exc:
        return None, f"is not valid JSON ({exc})"


# --------------------------------------------------------------------------- indexed

_INDEX = re.compile(r"(\d+)\.(.+)")


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict):
            flat.update(_flatten(item, name + "."))
        elif isinstance(item, list) and all(isinstance(x, dict) for x in item) and item:
            for i, x in enumerate(item):
                flat.update(_flatten(x, f"{name}.{i}."))
        else:
            flat[name] = item
    return flat


Groups = dict[int, dict[int, dict[str, Any]]]


def _indexed(
    attributes: dict[str, Any], source: IndexedMessages, note: Note
) -> list[Message] | None:
    """``{prefix}.<i>.<key>`` attributes as messages, in one pass over the attributes
    (a call resends the whole conversation, so a session can hold millions of them)."""
    head = source.prefix + "."
    call_head, part_head = source.tool_calls + ".", source.contents + "."
    fields: dict[int, dict[str, Any]] = {}
    calls: Groups = {}
    parts: Groups = {}
    for key, value in attributes.items():
        if not key.startswith(head):
            continue
        m = _INDEX.fullmatch(key, len(head))
        if m is None:
            continue
        i, rest = int(m[1]), m[2]
        own = fields.setdefault(i, {})
        for sub_head, groups in ((call_head, calls), (part_head, parts)):
            if rest.startswith(sub_head):
                sub = _INDEX.fullmatch(rest, len(sub_head))
                if sub is not None:
                    groups.setdefault(i, {}).setdefault(int(sub[1]), {})[sub[2]] = value
                    break
        else:
            own[rest] = value
    if not fields:
        structured = attributes.get(source.prefix)
        if isinstance(structured, list):  # the messages sent as one structured value
            flat = {
                f"{head}{i}.{key}": value
                for i, item in enumerate(structured)
                if isinstance(item, dict)
                for key, value in _flatten(item).items()
            }
            if flat:
                return _indexed(flat, source, note)
        return None
    return [
        _indexed_message(source, i, fields[i], calls.get(i, {}), parts.get(i, {}))
        for i in sorted(fields)
    ]


def _indexed_message(
    source: IndexedMessages,
    i: int,
    fields: dict[str, Any],
    calls: dict[int, dict[str, Any]],
    parts: dict[int, dict[str, Any]],
) -> Message:
    where = f"{source.prefix}.{i}"
    msg = Message(role=_str(fields.get(source.role)), where=where)
    content = fields.get(source.content)
    texts, reasonings = [], []
    if content is not None:
        texts.append(text_of(content))
    for k in sorted(parts):
        part = parts[k]
        kind, text = part.get(source.content_type), _str(part.get(source.content_text))
        if text is None:
            continue
        if kind in ("reasoning", "thinking"):
            reasonings.append(text)
        elif kind in (None, "text"):
            texts.append(text)
    msg.text = _join(texts)
    msg.reasoning = _join(reasonings)
    for j in sorted(calls):
        call = calls[j]
        msg.calls.append(
            Call(
                id=_str(call.get(source.call_id)),
                name=_str(call.get(source.call_name)),
                arguments=call.get(source.call_arguments),
                where=f"{where}.{source.tool_calls}.{j}",
            )
        )
    call_id = _str(fields.get(source.tool_call_id))
    if msg.role == "tool" or call_id is not None:
        msg.results.append(Result(call_id=call_id, content=content))
    return msg


# --------------------------------------------------------------------------- parts


def _parts_source(
    span: Span, source: PartsMessages, note: Note, *, output: bool
) -> list[Message] | None:
    value, where = _attribute_or_event(span, source.attribute, source.event)
    system = None
    if not output and source.system_attribute:
        system, system_where = _attribute_or_event(span, source.system_attribute, source.event)
        if system is not None:
            system, problem = decode_json(system) if _looks_json(system) else (system, None)
            if problem:
                note(f"{system_where} {problem}")
                system = None
    if value is None and system is None:
        return None
    messages: list[Message] = []
    if system is not None:
        text = text_of(system)
        if text:
            messages.append(Message(role="system", text=text, where=where))
    if value is None:
        return messages
    decoded, problem = decode_json(value)
    if problem:
        note(f"{where} {problem}")
        return messages or None
    if not isinstance(decoded, list):
        note(f"{where} is not a list of messages")
        return messages or None
    for i, item in enumerate(decoded):
        if isinstance(item, dict):
            messages.append(_parts_message(item, f"{where}[{i}]"))
        else:
            note(f"{where}[{i}] is not a message object")
    return messages


def _looks_json(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:1] in ("[", "{")


def _attribute_or_event(span: Span, attribute: str, event: str | None) -> tuple[Any, str]:
    if attribute in span.attributes:
        return span.attributes[attribute], attribute
    if event:
        for ev in span.events:
            if ev.name == event and attribute in ev.attributes:
                return ev.attributes[attribute], f"event {event}: {attribute}"
    return None, attribute


def _parts_message(item: dict[str, Any], where: str) -> Message:
    msg = Message(role=_str(item.get("role")), where=where)
    texts, reasonings = [], []
    parts = item.get("parts")
    if not isinstance(parts, list):
        content = item.get("content")
        parts = [] if content is None else [{"type": "text", "content": content}]
    for part in parts:
        if not isinstance(part, dict):
            texts.append(text_of(part))
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(text_of(part.get("content")))
        elif kind in ("reasoning", "thinking"):
            reasonings.append(text_of(part.get("content")))
        elif kind == "tool_call":
            msg.calls.append(
                Call(
                    id=_str(part.get("id")),
                    name=_str(part.get("name")),
                    arguments=part.get("arguments"),
                    where=f"{where}.parts",
                )
            )
        elif kind == "tool_call_response":
            msg.results.append(Result(call_id=_str(part.get("id")), content=part.get("response")))
    msg.text = _join(texts)
    msg.reasoning = _join(reasonings)
    return msg


# --------------------------------------------------------------------------- events


def _events(span: Span, source: EventMessages, note: Note) -> list[Message] | None:
    found = [ev for ev in span.events if ev.name in source.events]
    if not found:
        return None
    messages = []
    for ev in found:
        where = f"event {ev.name}"
        body: Any = dict(ev.attributes)
        if source.body and source.body in ev.attributes:
            body, problem = decode_json(ev.attributes[source.body])
            if problem:
                note(f"{where}: {source.body} {problem}")
                continue
            if not isinstance(body, dict):
                body = {"content": body}
        inner = body.get("message")
        if isinstance(inner, str) and _looks_json(inner):
            inner, _ = decode_json(inner)
        if isinstance(inner, dict):  # a choice: {index, finish_reason, message: {...}}
            body = {**body, **inner}
        msg = Message(role=source.events[ev.name], where=where)
        msg.text = text_of(body.get("content"))
        calls = body.get("tool_calls")
        if isinstance(calls, str) and _looks_json(calls):
            calls, _ = decode_json(calls)
        for j, call in enumerate(calls if isinstance(calls, list) else []):
            if not isinstance(call, dict):
                continue
            function = call.get("function") if isinstance(call.get("function"), dict) else call
            msg.calls.append(
                Call(
                    id=_str(call.get("id")),
                    name=_str(function.get("name")),
                    arguments=function.get("arguments"),
                    where=f"{where}: tool_calls[{j}]",
                )
            )
        if msg.role == "tool":
            call_id = _str(body.get("id", body.get("tool_call_id")))
            msg.results.append(Result(call_id=call_id, content=body.get("content")))
        messages.append(msg)
    return messages


# --------------------------------------------------------------------------- helpers


def _str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def _join(pieces: list[str | None]) -> str | None:
    if len(pieces) < 2:
        return pieces[0] or None if pieces else None
    kept = [p for p in pieces if p]
    return "\n".join(kept) if kept else None
