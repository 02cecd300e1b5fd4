"""The starters on spans that the real frameworks sent (recorded by tests/frameworks from
LangGraph, the OpenAI Agents SDK, Pydantic AI and the Vercel AI SDK against the project's
fake model), and the findings the mappings of before give on the same spans. The live
runs, through a real edge, are in tests/frameworks."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from evalkit.atif import validate_trajectory
from evalkit.otel.build import build_trajectory
from evalkit.otel.mapping import load_starter, parse_mapping
from evalkit.otel.model import Span, session_id_of

CAPTURED = Path(__file__).parents[1] / "frameworks" / "captured"
STARTER_OF = {
    "langgraph": "openinference",
    "openai-agents": "openinference",
    "pydantic-ai": "genai",
    "vercel-ai": "vercel-ai",
}
QUESTION = "What is the weather in Paris?"
RESULT = "18°C, cloudy in Paris"
ANSWER = "It is 18°C and cloudy in Paris."


AI_SDK_7 = Path(__file__).parents[1] / "frameworks" / "vercel_ai7" / "captured"
"""The Vercel AI SDK 7 (Node 22, so recorded here rather than run): its default spans follow
the GenAI conventions, its legacy ones are AI SDK 6's ai.* spans."""


def recorded() -> list[tuple[str, str]]:
    found = []
    for path in sorted(CAPTURED.glob("*.json")):
        [starter] = [s for prefix, s in STARTER_OF.items() if path.name.startswith(prefix)]
        found.append((path.name, starter))
    for path in sorted(AI_SDK_7.glob("*.json")):
        starter = "vercel-ai" if path.name.startswith("legacy") else "genai"
        found.append((f"../vercel_ai7/captured/{path.name}", starter))
    return found


def spans_of(name: str) -> list[Span]:
    return msgspec.json.decode((CAPTURED / name).read_bytes(), type=list[Span])


@pytest.mark.parametrize(("name", "starter"), recorded())
def test_the_session_id_is_found_where_the_framework_puts_it(name, starter):
    # AI SDK 7's GenAI spans name the session in its runtime context, which the genai
    # starter (the GenAI conventions' gen_ai.conversation.id) does not read: auto does
    ai_sdk_7_genai = name.startswith("../vercel_ai7") and starter == "genai"
    roots = [s for s in spans_of(name) if s.parent_span_id is None]
    for used in ["auto"] if ai_sdk_7_genai else [starter, "auto"]:
        names = load_starter(used)["session_id"]
        assert {session_id_of(s, names) for s in roots} == {"captured-session"}, used


def build(name: str, mapping: dict):
    result = build_trajectory(
        spans_of(name), parse_mapping(mapping), session_id="s1", agent_name="weather"
    )
    assert validate_trajectory(result.trajectory) == []
    return result


def test_every_framework_is_recorded():
    names = {name for name, _ in recorded()}
    for prefix in STARTER_OF:
        assert any(n.startswith(prefix) for n in names), f"no recorded spans of {prefix}"


@pytest.mark.parametrize("starter_kind", ["own", "auto"])
@pytest.mark.parametrize(("name", "starter"), recorded())
def test_the_starter_reads_what_the_framework_sent(name, starter, starter_kind):
    result = build(name, load_starter(starter if starter_kind == "own" else "auto"))
    steps = result.trajectory["steps"]
    users = [s for s in steps if s["source"] == "user"]
    assert [u["message"] for u in users] == [QUESTION]
    calls = [c for s in steps for c in s.get("tool_calls", [])]
    assert [(c["function_name"], c["arguments"]) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    [step] = [s for s in steps if s.get("tool_calls")]
    assert [r["content"] for r in step["observation"]["results"]] == [RESULT]
    assert result.answer == ANSWER
    metrics = [s.get("metrics", {}) for s in steps]
    assert sum(m.get("prompt_tokens", 0) for m in metrics) == 130
    assert sum(m.get("completion_tokens", 0) for m in metrics) == 22
    assert result.unread == [] and result.findings == []


OLD_OPENINFERENCE = {
    **load_starter("openinference"),
    "answer": [
        {"span": "agent", "attribute": "output.value"},
        {"span": "root", "attribute": "output.value"},
        {"span": "last_llm"},
    ],
    "tool": {"name": ["tool.name"], "result": ["output.value"]},
}


def without_drop_empty(mapping: dict) -> dict:
    body = json.loads(json.dumps(mapping))
    for source in body["llm"]["input_messages"]:
        source.pop("drop_empty", None)
    return body


@pytest.mark.parametrize(
    ("prefix", "mapping", "rules"),
    [
        ("langgraph", OLD_OPENINFERENCE, ["answer-is-json", "tool-result-envelope"]),
        ("pydantic-ai-v5", without_drop_empty(load_starter("genai")), ["empty-user-step"]),
        ("langgraph", load_starter("genai"), ["nothing-read"]),
        ("pydantic-ai", load_starter("vercel-ai"), ["nothing-read"]),
        ("vercel-ai", load_starter("openinference"), ["nothing-read"]),
    ],
)
def test_a_mapping_that_does_not_fit_is_named_by_a_finding(prefix, mapping, rules):
    names = [n for n, _ in recorded() if n.startswith(prefix)]
    assert names
    for name in names:
        assert sorted(f.rule for f in build(name, mapping).findings) == rules, name
