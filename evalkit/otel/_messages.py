"""Reading chat messages out of a span, in the four forms a mapping can name: indexed
attributes (OpenInference), a list of JSON chat messages (OTel GenAI's ``{role, parts}``,
and the ``{role, content}`` shapes of the OpenAI, Anthropic and Vercel AI SDK messages; JSON
string or structured, on the span or on an event), one event per message (older GenAI), and
plain text plus a list of tool calls in attributes of their own (the Vercel AI SDK's reply).

Every reader returns plain :class:`Message` objects, or None when the span does not have
the source at all; problems reading a source that is there are reported through ``note``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalkit.otel import _values
from evalkit.otel.mapping import (
    EventMessages,
    IndexedMessages,
    MessageSource,
    Name,
    PartsMessages,
    TextMessages,
    label,
)
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
    where: str = ""
    """The message it was read from."""


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
        elif isinstance(source, TextMessages):
            found = _text_source(span, source, note, output=output)
        else:
            found = _events(span, source, note)
        if found is not None:
            return _adjusted(found, source)
    return []


def _adjusted(messages: list[Message], source: MessageSource) -> list[Message]:
    """Roles renamed as the source says; with ``drop_empty``, a system or user message with
    no text is no turn: its tool results make it a tool message, else it is left out."""
    for msg in messages:
        if msg.role is not None and source.roles:
            msg.role = source.roles.get(msg.role, msg.role)
        for result in msg.results:
            result.where = result.where or msg.where
    if not source.drop_empty:
        return messages
    kept = []
    for msg in messages:
        if msg.role in ("system", "user") and not msg.text:
            if not msg.results:
                continue
            msg.role = "tool"
        kept.append(msg)
    return kept


def describe(sources: list[MessageSource]) -> str:
    """Where a mapping looks for messages, for the line saying none were found."""
    places = []
    for source in sources:
        if isinstance(source, IndexedMessages):
            places.append(f"{source.prefix}.<i>.*")
        elif isinstance(source, PartsMessages):
            event = f" or event {source.event}" if source.event else ""
            places.append(f"{label(source.attribute)}{event}")
        elif isinstance(source, TextMessages):
            places.append(label([*_as_list(source.attribute), *_as_list(source.tool_calls)]))
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
    if isinstance(decoded, dict):  # one message, not a list (a raw response's message)
        decoded = [decoded]
    if not isinstance(decoded, list):
        note(f"{where} is not a list of messages")
        return messages or None
    items: Message | None = None
    for i, item in enumerate(decoded):
        if not isinstance(item, dict):
            note(f"{where}[{i}] is not a message object")
            items = None
        elif "role" not in item and item.get("type") in _CALL_PARTS | _RESULT_PARTS:
            # OpenAI Responses items: calls and results stand alone, beside the message
            # they belong to; they join the assistant message before them (or a new one)
            if items is None:
                items = Message(role="assistant", where=f"{where}[{i}]")
                messages.append(items)
            part = _parts_message({"parts": [item]}, f"{where}[{i}]")
            items.calls += part.calls
            items.results += part.results
        else:
            message = _parts_message(item, f"{where}[{i}]")
            messages.append(message)
            items = message if item.get("type") == "message" else None
    return messages


def _looks_json(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:1] in ("[", "{")


def _attribute_or_event(span: Span, attribute: Name, event: str | None) -> tuple[Any, str]:
    where = label(attribute)
    value = _values.resolve(span.attributes, attribute)
    if value is not None:
        return value, where
    if event:
        for ev in span.events:
            if ev.name == event:
                value = _values.resolve(ev.attributes, attribute)
                if value is not None:
                    return value, f"event {event}: {where}"
    return None, where


_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_REASONING_PARTS = frozenset({"reasoning", "thinking"})
_CALL_PARTS = frozenset({"tool_call", "tool-call", "tool_use", "function_call"})
_RESULT_PARTS = frozenset({"tool_call_response", "tool-result", "tool_result"})
_RESULT_PARTS |= {"function_call_output"}
# The keys the conventions give a call's id, name and arguments, and a result's content:
# GenAI (id, name, arguments, response; Pydantic AI: result), the Vercel AI SDK (toolCallId,
# toolName, input or args, output or result), Anthropic (tool_use_id, input, content) and
# OpenAI's Responses items (call_id, arguments, output).
_CALL_ID_KEYS = ("call_id", "toolCallId", "tool_call_id", "tool_use_id", "id")
_CALL_NAME_KEYS = ("name", "toolName")
_ARGUMENT_KEYS = ("arguments", "input", "args")
_RESULT_KEYS = ("response", "result", "output", "content")
_TYPED_OUTPUTS = frozenset({"text", "json", "error-text", "error-json", "content"})


def _parts_message(item: dict[str, Any], where: str) -> Message:
    msg = Message(role=_str(item.get("role")), where=where)
    texts: list[str | None] = []
    reasonings: list[str | None] = []
    parts = item.get("parts")
    if not isinstance(parts, list):
        content = item.get("content")
        if isinstance(content, list):
            parts = content
        else:
            parts = [] if content is None else [{"type": "text", "content": content}]
    if msg.role == "tool" and not any(_is_result(p) for p in parts):
        # an OpenAI-style tool message: the content answers tool_call_id
        call_id = _str(item.get("tool_call_id", item.get("id")))
        msg.results.append(Result(call_id=call_id, content=_tool_content(item.get("content"))))
        parts = []
    for part in parts:
        if not isinstance(part, dict):
            texts.append(text_of(part))
            continue
        kind = part.get("type")
        if kind in _TEXT_PARTS or (kind is None and ("text" in part or "content" in part)):
            texts.append(text_of(_pick(part, ("content", "text"))))
        elif kind in _REASONING_PARTS:
            reasonings.append(text_of(_pick(part, ("content", "text", "reasoning", "thinking"))))
        elif kind in _CALL_PARTS:
            msg.calls.append(_call_object(part, f"{where}.parts"))
        elif kind in _RESULT_PARTS:
            msg.results.append(
                Result(
                    call_id=_str(_pick(part, _CALL_ID_KEYS)),
                    content=_tool_content(_pick(part, _RESULT_KEYS)),
                )
            )
    calls = item.get("tool_calls")
    if isinstance(calls, str) and _looks_json(calls):
        calls, _ = decode_json(calls)
    for j, call in enumerate(calls if isinstance(calls, list) else []):
        if isinstance(call, dict):
            msg.calls.append(_call_object(call, f"{where}.tool_calls[{j}]"))
    msg.text = _join(texts)
    msg.reasoning = _join(reasonings)
    return msg


def _is_result(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in _RESULT_PARTS


def _pick(part: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if part.get(key) is not None:
            return part[key]
    return None


def _call_object(call: dict[str, Any], where: str) -> Call:
    """A tool call in any of the conventions' shapes: ``{id, name, arguments}``,
    ``{toolCallId, toolName, input}``, or OpenAI's ``{id, function: {name, arguments}}``."""
    function = call.get("function")
    inner = function if isinstance(function, dict) else call
    return Call(
        id=_str(_pick(call, _CALL_ID_KEYS)),
        name=_str(_pick(inner, _CALL_NAME_KEYS)),
        arguments=_pick(inner, _ARGUMENT_KEYS),
        where=where,
    )


def _tool_content(value: Any) -> Any:
    """A tool result as sent back to the model, unwrapped from the Vercel AI SDK's typed
    output (``{"type": "text" | "json", "value": ...}``) and from lists of text blocks."""
    if isinstance(value, dict) and "value" in value and value.get("type") in _TYPED_OUTPUTS:
        value = value["value"]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        text = text_of(value)
        if text is not None:
            return text
    return value


# --------------------------------------------------------------------------- plain text


def _text_source(
    span: Span, source: TextMessages, note: Note, *, output: bool
) -> list[Message] | None:
    text = _values.first(span.attributes, source.attribute)
    calls = _values.first(span.attributes, source.tool_calls)
    if text is None and calls is None:
        return None
    role = source.role or ("assistant" if output else "user")
    msg = Message(role=role, text=text_of(text), where=label(source.attribute) or "text")
    if calls is not None:
        where = label(source.tool_calls)
        decoded, problem = decode_json(calls)
        if problem:
            note(f"{where} {problem}")
        elif not isinstance(decoded, list):
            note(f"{where} is not a list of tool calls")
        else:
            for j, call in enumerate(decoded):
                if isinstance(call, dict):
                    msg.calls.append(_call_object(call, f"{where}[{j}]"))
                else:
                    note(f"{where}[{j}] is not a tool call object")
    return [msg]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


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
