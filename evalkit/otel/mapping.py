"""Span mappings: where an agent's spans keep what a trajectory needs.

A mapping is a JSON object (stored per agent, in versions) that the trajectory builder
(:mod:`evalkit.otel.build`) reads spans with. One format covers the conventions agents are
traced with: OpenInference (messages flattened into indexed attributes), the OTel GenAI
conventions (messages as a JSON string or a structured value in an attribute or the
``gen_ai.client.inference.operation.details`` event, or one event per message in the older
form), and plain text with the tool calls apart (the Vercel AI SDK); any value may sit
inside a JSON attribute (:class:`AttributeRef`). ``docs/tracing.md`` describes it key by key.

:func:`validate_mapping` reports every broken rule at once, each with its key path, the
rule and the fix; :func:`parse_mapping` validates and returns the typed :class:`Mapping`.
:func:`load_starter` reads the mappings shipped with evalkit.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

import msgspec
from msgspec import inspect as mi

__all__ = [
    "STARTERS",
    "AnswerSource",
    "AttributeRef",
    "EventMessages",
    "IndexedMessages",
    "LlmRule",
    "Mapping",
    "MappingError",
    "MappingValidationError",
    "MessageSource",
    "PartsMessages",
    "SpanKinds",
    "SpanMatch",
    "TextMessages",
    "ToolRule",
    "Usage",
    "attributes_label",
    "label",
    "load_starter",
    "names",
    "parse_mapping",
    "validate_mapping",
]

MAPPING_FORMAT: Final = 1
STARTERS: Final = ("openinference", "genai", "vercel-ai", "auto")

Role = Literal["system", "user", "assistant", "tool"]
Scalar = str | int | float | bool


class _Rule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    pass


class AttributeRef(_Rule):
    """A value inside an attribute: the attribute's text decoded as JSON (``json``, implied
    by ``path`` and ``where``), then the value at ``path`` (keys and list indexes, ``-1`` the
    last). It counts only when every ``where`` path of the decoded value equals its value;
    otherwise, or when the text is not JSON or the path leads nowhere, the span is taken not
    to have it and the next name is tried."""

    attribute: str
    path: str | list[str | int] | None = None
    json: bool = False
    where: dict[str, Scalar] | None = None


Name = str | AttributeRef
Names = str | AttributeRef | list[str | AttributeRef]
"""Attribute names (or references into JSON attributes), tried in order; the first one a
span has wins."""


class SpanMatch(_Rule):
    """Matches a span by name (a glob: ``*``, ``?``, ``[abc]``) and/or an attribute: with
    ``values`` the attribute must equal one of them, without it the span must have it."""

    name: str | None = None
    attribute: str | None = None
    values: list[Scalar] | None = None


class SpanKinds(_Rule):
    """Which spans are LLM calls, tool executions and agent invocations; a span matching
    any rule of a list is of that kind (LLM first, then tool, then agent)."""

    llm: list[SpanMatch]
    tool: list[SpanMatch] = msgspec.field(default_factory=list)
    agent: list[SpanMatch] = msgspec.field(default_factory=list)


class _MessageSource(_Rule):
    """What every form of message source takes."""

    roles: dict[str, Role] = msgspec.field(default_factory=dict)
    """Roles renamed as read (``{"human": "user", "model": "assistant"}``)."""
    drop_empty: bool = False
    """A system or user message with no text makes no step (its tool results still count)."""


class IndexedMessages(_MessageSource, tag="indexed", tag_field="form", kw_only=True):
    """Messages flattened into attributes with zero-based indexes, OpenInference style:
    ``<prefix>.<i>.message.role``, ``<prefix>.<i>.message.tool_calls.<j>.tool_call.id``...
    The keys below each message default to OpenInference's names."""

    prefix: str
    role: str = "message.role"
    content: str = "message.content"
    tool_call_id: str = "message.tool_call_id"
    tool_calls: str = "message.tool_calls"
    call_id: str = "tool_call.id"
    call_name: str = "tool_call.function.name"
    call_arguments: str = "tool_call.function.arguments"
    contents: str = "message.contents"
    content_type: str = "message_content.type"
    content_text: str = "message_content.text"


class PartsMessages(_MessageSource, tag="parts", tag_field="form", kw_only=True):
    """A list of ``{role, parts: [...]}`` messages (the OTel GenAI shape), as a JSON string or
    a structured value, in a span attribute or, failing that, in the attributes of ``event``."""

    attribute: str | AttributeRef
    event: str | None = None
    system_attribute: str | None = None
    """Holds system instructions kept apart from the messages (``gen_ai.system_instructions``);
    read for input messages only."""


class TextMessages(_MessageSource, tag="text", tag_field="form", kw_only=True):
    """One message from plain attributes: its text in ``attribute`` (a reference with
    ``json`` decodes a JSON-quoted one), its tool calls in ``tool_calls`` (a list of call
    objects, as JSON text or structured), with the role ``role`` (for input messages,
    ``user`` by default)."""

    attribute: Names = msgspec.field(default_factory=list)
    tool_calls: Names = msgspec.field(default_factory=list)
    role: Role | None = None


class EventMessages(_MessageSource, tag="events", tag_field="form", kw_only=True):
    """One span event per message (the older GenAI form): the event's name gives the role.
    The message is the JSON object in the ``body`` attribute, else the event's own attributes
    (``content``, ``tool_calls``, ``id``, and ``message`` for a choice)."""

    events: dict[str, Role]
    body: str | None = "gen_ai.event.content"


MessageSource = IndexedMessages | PartsMessages | EventMessages | TextMessages


class Usage(_Rule):
    """Token counts and cost of an LLM call. ``prompt_tokens`` counts every input token,
    cached ones included; ``cached_tokens`` is the part served from a cache."""

    prompt_tokens: Names = msgspec.field(default_factory=list)
    completion_tokens: Names = msgspec.field(default_factory=list)
    cached_tokens: Names = msgspec.field(default_factory=list)
    cost_usd: Names = msgspec.field(default_factory=list)
    extra: dict[str, Names] = msgspec.field(default_factory=dict)
    """Other counters, copied into the step's ``metrics.extra`` under these keys."""


class LlmRule(_Rule):
    input_messages: list[MessageSource]
    """Tried in order; the first source that yields messages is used."""
    output_messages: list[MessageSource]
    model: Names = msgspec.field(default_factory=list)
    reasoning: Names = msgspec.field(default_factory=list)
    """Attributes holding reasoning text; reasoning parts of output messages are read too."""
    usage: Usage = msgspec.field(default_factory=Usage)


class ToolRule(_Rule):
    name: Names = msgspec.field(default_factory=list)
    call_id: Names = msgspec.field(default_factory=list)
    """The id of the LLM tool call the span answers."""
    arguments: Names = msgspec.field(default_factory=list)
    result: Names = msgspec.field(default_factory=list)


class AnswerSource(_Rule):
    """``root``: the top-level span; ``agent``: the outermost agent span; ``last_llm``: the
    last LLM call (its first output message's text unless ``attribute`` is given).
    ``plain_text`` skips a value that is a JSON object or list (an agent's state, say), so
    that the next source is tried."""

    span: Literal["root", "agent", "last_llm"]
    attribute: Names | None = None
    plain_text: bool = False


class Mapping(_Rule, kw_only=True):
    session_id: Names
    span_kinds: SpanKinds
    llm: LlmRule
    answer: list[AnswerSource]
    input: list[AnswerSource] = msgspec.field(default_factory=list)
    """Where the user's request is when no LLM input message carries it."""
    tool: ToolRule = msgspec.field(default_factory=ToolRule)
    exclude_spans: list[SpanMatch] = msgspec.field(default_factory=list)
    agent_version: Names = msgspec.field(default_factory=lambda: ["service.version"])
    format: int = MAPPING_FORMAT


def names(value: Names | None) -> list[Name]:
    """Attribute names as a list (a single name is a list of one)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def label(value: Names | None) -> str:
    """How messages name the attributes of a rule: ``output.value`` or ``output.value
    at content``, several joined by `` / ``."""
    return " / ".join(_label(name) for name in names(value))


def attributes_label(value: Names | None) -> str:
    """The attributes a rule reads, each once, joined by `` / ``: to say they are missing."""
    attributes = (n if isinstance(n, str) else n.attribute for n in names(value))
    return " / ".join(dict.fromkeys(attributes))


def _label(name: Name) -> str:
    if isinstance(name, str):
        return name
    path = name.path if isinstance(name.path, str | None) else ".".join(map(str, name.path))
    if path:
        return f"{name.attribute} at {path}"
    return f"{name.attribute} (JSON)" if name.json or name.where else name.attribute


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True, slots=True)
class MappingError:
    path: str
    """Where in the mapping, e.g. ``llm.input_messages[0].form``; empty for the whole."""
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(mapping)'}: [{self.rule}] {self.message}"


class MappingValidationError(ValueError):
    """Raised by :func:`parse_mapping`; ``errors`` lists every broken rule."""

    def __init__(self, errors: list[MappingError]) -> None:
        self.errors = errors
        shown = "; ".join(str(e) for e in errors[:10])
        more = f"; and {len(errors) - 10} more" if len(errors) > 10 else ""
        super().__init__(f"invalid span mapping ({len(errors)} problems): {shown}{more}")


MAX_ITEMS: Final = 256
MAX_TEXT: Final = 1024


class _Report:
    def __init__(self) -> None:
        self.errors: list[MappingError] = []

    def add(self, path: str, rule: str, message: str) -> None:
        self.errors.append(MappingError(path, rule, message))


def _key(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_EXPECTED: Final = {
    mi.StrType: "a string",
    mi.IntType: "a whole number",
    mi.BoolType: "true or false",
    mi.FloatType: "a number",
    mi.ListType: "a list",
    mi.DictType: "an object",
    mi.StructType: "an object",
    mi.NoneType: "null",
}


def _describe(t: mi.Type) -> str:
    if isinstance(t, mi.UnionType) and any(
        isinstance(x, mi.StructType) and x.cls is AttributeRef for x in t.types
    ):
        return (
            'an attribute name, a reference {"attribute": ..., "path": ...} into a JSON '
            "attribute, or a list of them"
        )
    if isinstance(t, mi.UnionType):
        parts = [_describe(x) for x in t.types]
        if all(isinstance(x, mi.StructType) for x in t.types):
            return "an object"
        return " or ".join(dict.fromkeys(parts))
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(repr(v) for v in t.values)
    if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.StrType):
        return "a list of strings"
    return _EXPECTED.get(type(t), "a value")


def _check(report: _Report, value: object, t: mi.Type, path: str) -> None:
    """Check ``value`` against the type ``t``, reporting every problem below it."""
    if isinstance(t, mi.AnyType):
        return
    if isinstance(t, mi.UnionType):
        _check_union(report, value, t, path)
        return
    if isinstance(t, mi.LiteralType):
        if value not in t.values or isinstance(value, bool):
            report.add(
                path,
                "bad-value",
                f"is {json.dumps(value)}; use one of {', '.join(json.dumps(v) for v in t.values)}",
            )
        return
    if isinstance(t, mi.StructType):
        _check_struct(report, value, t, path)
        return
    if isinstance(t, mi.ListType):
        if not isinstance(value, list):
            report.add(path, "bad-type", f"must be {_describe(t)}, not {_kind(value)}")
            return
        if len(value) > MAX_ITEMS:
            report.add(path, "too-many", f"has {len(value)} items; the most is {MAX_ITEMS}")
            return
        for i, item in enumerate(value):
            _check(report, item, t.item_type, f"{path}[{i}]")
        return
    if isinstance(t, mi.DictType):
        if not isinstance(value, dict):
            report.add(path, "bad-type", f"must be an object, not {_kind(value)}")
            return
        if len(value) > MAX_ITEMS:
            report.add(path, "too-many", f"has {len(value)} keys; the most is {MAX_ITEMS}")
            return
        for k, item in value.items():
            if not k:
                report.add(path, "empty-key", "has an empty key; name every entry")
            _check(report, item, t.value_type, _key(path, k))
        return
    ok = {
        mi.StrType: lambda v: isinstance(v, str),
        mi.IntType: lambda v: isinstance(v, int) and not isinstance(v, bool),
        mi.FloatType: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        mi.BoolType: lambda v: isinstance(v, bool),
        mi.NoneType: lambda v: v is None,
    }[type(t)](value)
    if not ok:
        report.add(path, "bad-type", f"must be {_describe(t)}, not {_kind(value)}")
    elif isinstance(value, str) and len(value) > MAX_TEXT:
        report.add(path, "too-long", f"is {len(value)} characters; the most is {MAX_TEXT}")


def _matches_shape(value: object, t: mi.Type) -> bool:
    if isinstance(t, mi.LiteralType):
        return isinstance(value, str) and isinstance(t.values[0], str)
    if isinstance(t, mi.StrType):
        return isinstance(value, str)
    if isinstance(t, mi.NoneType):
        return value is None
    if isinstance(t, mi.ListType):
        return isinstance(value, list)
    if isinstance(t, mi.StructType | mi.DictType):
        return isinstance(value, dict)
    if isinstance(t, mi.IntType):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(t, mi.FloatType):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(t, mi.BoolType):
        return isinstance(value, bool)
    return False


def _check_union(report: _Report, value: object, t: mi.UnionType, path: str) -> None:
    structs = [x for x in t.types if isinstance(x, mi.StructType) and x.tag_field]
    if structs and isinstance(value, dict):
        field = structs[0].tag_field
        assert field is not None
        tags = {x.tag: x for x in structs}
        tag = value.get(field)
        if tag not in tags or isinstance(tag, bool):
            known = ", ".join(json.dumps(k) for k in tags)
            got = "missing" if field not in value else f"{json.dumps(tag)}"
            report.add(
                _key(path, field),
                "bad-form",
                f"is {got}; say which form this is with one of {known}",
            )
            return
        _check_struct(report, value, tags[tag], path)
        return
    for option in t.types:
        if _matches_shape(value, option):
            _check(report, value, option, path)
            return
    report.add(path, "bad-type", f"must be {_describe(t)}, not {_kind(value)}")


def _check_struct(report: _Report, value: object, t: mi.StructType, path: str) -> None:
    if not isinstance(value, dict):
        report.add(path, "bad-type", f"must be an object, not {_kind(value)}")
        return
    fields = {f.encode_name: f for f in t.fields}
    allowed = set(fields) | ({t.tag_field} if t.tag_field else set())
    for k in value:
        if k in allowed:
            continue
        close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys here are {_keys(allowed)}"
        report.add(_key(path, str(k)), "unknown-key", f"is not a mapping key; {hint}")
    for name, f in fields.items():
        if name not in value:
            if f.required:
                report.add(
                    _key(path, name),
                    "missing-key",
                    f"is required; add it ({_describe(f.type)}, see docs/tracing.md)",
                )
            continue
        _check(report, value[name], f.type, _key(path, name))


def _keys(allowed: set[str]) -> str:
    return ", ".join(sorted(allowed))


def _semantics(report: _Report, m: Mapping) -> None:
    """The rules the types alone do not say."""
    if m.format != MAPPING_FORMAT:
        report.add(
            "format",
            "bad-format",
            f"is {m.format}; this evalkit reads mapping format {MAPPING_FORMAT}; write 1 (or "
            "leave the key out)",
        )
    _names(report, m.session_id, "session_id", required=True, plain=True)
    for field in ("llm", "tool", "agent"):
        for i, match in enumerate(getattr(m.span_kinds, field)):
            _match(report, match, f"span_kinds.{field}[{i}]")
    if not m.span_kinds.llm:
        report.add(
            "span_kinds.llm",
            "empty",
            "lists no rule, so no span would count as an LLM call; add one, e.g. "
            '{"attribute": "openinference.span.kind", "values": ["LLM"]}',
        )
    for i, match in enumerate(m.exclude_spans):
        _match(report, match, f"exclude_spans[{i}]")
    for field in ("input_messages", "output_messages"):
        sources = getattr(m.llm, field)
        if not sources:
            report.add(
                f"llm.{field}",
                "empty",
                "lists no source; add at least one (see the starters: "
                "`evalkit agents mapping starter openinference|genai|vercel-ai|auto`)",
            )
        for i, source in enumerate(sources):
            _source(report, source, f"llm.{field}[{i}]", output=field == "output_messages")
    for field in ("model", "reasoning"):
        _names(report, getattr(m.llm, field), f"llm.{field}")
    usage = m.llm.usage
    for field in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"):
        _names(report, getattr(usage, field), f"llm.usage.{field}")
    for key, value in usage.extra.items():
        _names(report, value, f"llm.usage.extra.{key}", required=True)
    for field in ("name", "call_id", "arguments", "result"):
        _names(report, getattr(m.tool, field), f"tool.{field}")
    if m.span_kinds.tool and not names(m.tool.name):
        report.add(
            "tool.name",
            "missing-key",
            "is needed when span_kinds.tool recognises tool spans: name the attribute "
            'holding the tool\'s name (e.g. "tool.name" or "gen_ai.tool.name")',
        )
    if not m.answer:
        report.add(
            "answer",
            "empty",
            'lists no source; add one, e.g. {"span": "last_llm"} (the last LLM reply)',
        )
    for field in ("answer", "input"):
        for i, source in enumerate(getattr(m, field)):
            path = f"{field}[{i}]"
            if source.span != "last_llm" and not names(source.attribute):
                report.add(
                    _key(path, "attribute"),
                    "missing-key",
                    f'is required with "span": "{source.span}"; name the attribute to read '
                    '(e.g. "output.value")',
                )
            _names(report, source.attribute, _key(path, "attribute"))
    _names(report, m.agent_version, "agent_version")


def _names(
    report: _Report,
    value: Names | None,
    path: str,
    *,
    required: bool = False,
    plain: bool = False,
) -> None:
    """Attribute names: none empty or twice; ``plain`` when references into JSON are not
    read there (``session_id``, which the collector reads as spans arrive)."""
    listed = names(value)
    if required and not listed:
        report.add(path, "empty", "names no attribute; give one name or a list of names")
    for i, name in enumerate(listed):
        where = path if not isinstance(value, list) else f"{path}[{i}]"
        if isinstance(name, AttributeRef):
            if plain:
                report.add(
                    where,
                    "plain-names-only",
                    "takes attribute names only, not a reference into a JSON value: the "
                    "collector reads it as spans arrive; name the attribute itself",
                )
            _ref(report, name, where)
        elif not name.strip():
            report.add(where, "empty", "is an empty attribute name; write the attribute's name")
    keys = [n if isinstance(n, str) else msgspec.json.encode(n).decode() for n in listed]
    dupes = sorted({n for n in keys if keys.count(n) > 1 and n.strip()})
    if dupes:
        report.add(path, "duplicate", f"names {', '.join(dupes)} twice; list each name once")


def _ref(report: _Report, ref: AttributeRef, path: str) -> None:
    if not ref.attribute.strip():
        report.add(_key(path, "attribute"), "empty", "is empty; write the attribute's name")
    if ref.path is not None and not ref.path:
        report.add(
            _key(path, "path"),
            "empty",
            'is empty; write the path into the JSON value (e.g. "content" or "messages.-1"), '
            'or leave it out and say "json": true to decode the whole value',
        )
    if isinstance(ref.path, str) and any(not part for part in ref.path.split(".")):
        report.add(
            _key(path, "path"),
            "empty",
            f"{json.dumps(ref.path)} has an empty step; separate keys and indexes with single "
            'dots ("kwargs.content"), or give a list (["a.b", 0]) for keys that hold dots',
        )
    for key in ref.where or {}:
        if not key.strip() or any(not part for part in key.split(".")):
            report.add(
                _key(path, "where"),
                "empty",
                f"has the path {json.dumps(key)} with an empty step; write paths like "
                '"type" or "kwargs.type"',
            )


def _match(report: _Report, match: SpanMatch, path: str) -> None:
    if match.name is None and match.attribute is None:
        report.add(
            path,
            "empty-match",
            'matches nothing: give "name" (a glob on the span name), "attribute", or both',
        )
    if match.values is not None and match.attribute is None:
        report.add(
            _key(path, "values"),
            "values-without-attribute",
            'compares an attribute\'s value, so it needs "attribute" beside it',
        )
    if match.values is not None and not match.values:
        report.add(
            _key(path, "values"),
            "empty",
            "is an empty list, which no value equals; list the values, or leave the key out "
            "to match any span that has the attribute",
        )
    for key in ("name", "attribute"):
        value = getattr(match, key)
        if value is not None and not value.strip():
            report.add(_key(path, key), "empty", f"is empty; write the {key} to match")


def _source(report: _Report, source: MessageSource, path: str, *, output: bool) -> None:
    for role in source.roles:
        if not role.strip():
            report.add(_key(path, "roles"), "empty-key", "has an empty role; name the role")
    if isinstance(source, IndexedMessages):
        for f in source.__struct_fields__:
            value = getattr(source, f)
            if isinstance(value, str) and not value.strip():
                report.add(_key(path, f), "empty", "is empty; write the key (or leave it out)")
    elif isinstance(source, PartsMessages):
        _names(report, source.attribute, _key(path, "attribute"), required=True)
        for f in ("event", "system_attribute"):
            value = getattr(source, f)
            if value is not None and not value.strip():
                report.add(_key(path, f), "empty", "is empty; write the name (or leave it out)")
        if output and source.system_attribute is not None:
            report.add(
                _key(path, "system_attribute"),
                "input-only",
                "is read for input messages only; move it to llm.input_messages",
            )
    elif isinstance(source, TextMessages):
        if not names(source.attribute) and not names(source.tool_calls):
            report.add(
                path,
                "empty",
                'reads nothing: name the text\'s attribute in "attribute" (e.g. '
                '"ai.response.text"), the tool calls\' in "tool_calls", or both',
            )
        _names(report, source.attribute, _key(path, "attribute"))
        _names(report, source.tool_calls, _key(path, "tool_calls"))
    else:
        if not source.events:
            report.add(
                _key(path, "events"),
                "empty",
                'names no event; map event names to roles, e.g. {"gen_ai.user.message": "user"}',
            )
        if source.body is not None and not source.body.strip():
            report.add(_key(path, "body"), "empty", "is empty; name the attribute, or use null")


_TYPE_INFO: Final = mi.type_info(Mapping)


def validate_mapping(obj: object) -> list[MappingError]:
    """Every rule ``obj`` (decoded JSON) breaks as a span mapping; empty when it is valid."""
    report = _Report()
    if not isinstance(obj, dict):
        report.add("", "bad-type", f"a span mapping is a JSON object, not {_kind(obj)}")
        return report.errors
    if not obj:
        report.add(
            "",
            "empty",
            "the span mapping is an empty object; it says where the session id, the answer "
            "and the messages are in the spans (start from `evalkit agents mapping starter "
            "openinference`, `genai`, `vercel-ai` or `auto`)",
        )
        return report.errors
    assert isinstance(_TYPE_INFO, mi.StructType)
    _check_struct(report, obj, _TYPE_INFO, "")
    if report.errors:
        return report.errors
    try:
        mapping = msgspec.convert(obj, Mapping)
    except msgspec.ValidationError as exc:  # a gap between the walk and the Structs
        report.add("", "bad-type", str(exc))
        return report.errors
    _semantics(report, mapping)
    return report.errors


def parse_mapping(obj: object) -> Mapping:
    """The typed mapping, or :class:`MappingValidationError` listing every problem."""
    errors = validate_mapping(obj)
    if errors:
        raise MappingValidationError(errors)
    return msgspec.convert(obj, Mapping)


def load_starter(name: str) -> dict[str, Any]:
    """A starter mapping shipped with evalkit (one of :data:`STARTERS`), as JSON."""
    if name not in STARTERS:
        raise ValueError(f"no starter mapping {name!r}; the starters are {', '.join(STARTERS)}")
    text = resources.files("evalkit.otel").joinpath("starters", f"{name}.json").read_text()
    body: dict[str, Any] = json.loads(text)
    return body
