"""What looks wrong in a trajectory a mapping built, though every attribute it names was read:
the suspicious shapes real instrumentations produce when the mapping does not fit them.

Each :class:`Finding` names the rule, the span and the attribute, and says the fix.
``evalkit traces check`` exits 1 on any. The rules:

- ``answer-is-json``: the answer is a JSON object or list (an agent's state) while the last
  LLM reply is text;
- ``tool-result-envelope``: a tool result is a JSON envelope around the tool's text (a
  LangChain ``ToolMessage``, an MCP result);
- ``empty-user-step``: a user step with no text (tool results sent back as a user message);
- ``unclassified-span``: spans that a known convention marks as LLM calls, tools or agents,
  but that no ``span_kinds`` rule matches;
- ``nothing-read``: a session none of whose spans the mapping classifies at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from evalkit.otel import _messages, _values
from evalkit.otel.model import Span

__all__ = ["CONVENTIONS", "Finding", "envelope_path", "kinds_by_convention"]


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    span_id: str | None
    attribute: str
    message: str
    """What is wrong and how to fix it."""

    def __str__(self) -> str:
        where = f"span {self.span_id}: " if self.span_id else ""
        return f"[{self.rule}] {where}{self.attribute}: {self.message}"


CONVENTIONS: Final[dict[str, tuple[str, dict[str, str]]]] = {
    "openinference": (
        "openinference.span.kind",
        {"LLM": "llm", "TOOL": "tool", "AGENT": "agent"},
    ),
    "genai": (
        "gen_ai.operation.name",
        {
            "chat": "llm",
            "text_completion": "llm",
            "generate_content": "llm",
            "execute_tool": "tool",
            "invoke_agent": "agent",
        },
    ),
    "vercel-ai": (
        "ai.operationId",
        {
            "ai.generateText.doGenerate": "llm",
            "ai.streamText.doStream": "llm",
            "ai.generateObject.doGenerate": "llm",
            "ai.streamObject.doStream": "llm",
            "ai.toolCall": "tool",
            "ai.generateText": "agent",
            "ai.streamText": "agent",
            "ai.generateObject": "agent",
            "ai.streamObject": "agent",
        },
    ),
}
"""The attribute each convention marks its LLM, tool and agent spans with, and the values:
what the starters match on."""


def convention_kind(span: Span) -> tuple[str, str, str] | None:
    """(convention, kind, marker) of a span a known convention marks, else None."""
    for convention, (attribute, values) in CONVENTIONS.items():
        value = span.attributes.get(attribute)
        if isinstance(value, str) and value in values:
            return convention, values[value], f"{attribute}={value}"
    return None


def kinds_by_convention(spans: list[Span]) -> dict[str, int]:
    """How many spans each known convention marks, most first."""
    counts: dict[str, int] = {}
    for span in spans:
        found = convention_kind(span)
        if found is not None:
            counts[found[0]] = counts.get(found[0], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


_ENVELOPE_KEYS: Final = frozenset(
    {"tool_call_id", "toolCallId", "tool_use_id", "lc", "artifact", "isError"}
)
_ENVELOPE_TYPES: Final = frozenset(
    {"tool", "text", "tool_result", "tool-result", "tool_call_response"}
)
_TEXT_PATHS: Final = ("content", "text", "output", "data.content", "kwargs.content")


def envelope_path(value: Any) -> str | None:
    """The path to the text inside a tool result that is an envelope around it (a LangChain
    ``ToolMessage``, serialized or not; an MCP ``CallToolResult``), else None."""
    if isinstance(value, str):
        if not value.lstrip().startswith("{"):
            return None
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    marked = bool(_ENVELOPE_KEYS & value.keys()) or value.get("type") in _ENVELOPE_TYPES
    if not marked:
        return None
    for path in _TEXT_PATHS:
        found = _values.at_path(value, path)
        if isinstance(found, str | list) and _messages.text_of(found):
            return path
    return None
