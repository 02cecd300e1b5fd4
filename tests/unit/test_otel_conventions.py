"""The mapping language on the shapes real instrumentations send: references into JSON
attributes, plain-text answers, role renaming and empty messages, the plain-text message
form, the chat-message shapes of the parts form, and the findings of `traces check`.

The spans here are written by hand in the shapes each convention documents; the spans that
real frameworks sent are in tests/frameworks (recorded, and live against a real edge)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from evalkit.atif import validate_trajectory
from evalkit.otel.build import build_trajectory
from evalkit.otel.mapping import load_starter, parse_mapping, validate_mapping
from evalkit.otel.model import Span

T0 = 1_767_258_000_000_000_000
QUESTION = "What is the weather in Paris?"
RESULT = "18°C, cloudy in Paris"
ANSWER = "It is 18°C and cloudy in Paris."
ARGS = {"city": "Paris"}


def span(sid: str, parent: str | None, start: int, name: str, **attributes: Any) -> Span:
    return Span(
        trace_id="a" * 32,
        span_id=sid * 16,
        parent_span_id=None if parent is None else parent * 16,
        name=name,
        start_ns=T0 + start * 1_000_000,
        end_ns=T0 + (start + 10) * 1_000_000,
        attributes=attributes,
    )


def build(spans: list[Span], mapping: dict[str, Any]):
    result = build_trajectory(spans, parse_mapping(mapping), session_id="s1", agent_name="bot")
    assert validate_trajectory(result.trajectory) == [], result.trajectory
    return result


def calls_and_results(result) -> tuple[list[dict], list[str]]:
    steps = result.trajectory["steps"]
    calls = [c for s in steps for c in s.get("tool_calls", [])]
    results = [r["content"] for s in steps for r in s.get("observation", {}).get("results", [])]
    return calls, results


def sources(result) -> list[str]:
    return [s["source"] for s in result.trajectory["steps"]]


def rules(result) -> list[str]:
    return [f.rule for f in result.findings]


# --------------------------------------------------------------------------- LangGraph shape

TOOL_MESSAGE = {
    "content": RESULT,
    "additional_kwargs": {},
    "type": "tool",
    "name": "get_weather",
    "tool_call_id": "call_1",
    "status": "success",
}


def langgraph_spans(tool_output: Any = TOOL_MESSAGE) -> list[Span]:
    """OpenInference's LangChain shapes: a CHAIN root and an AGENT node whose output is the
    graph state, two LLM calls, and a TOOL span recording the whole ToolMessage."""
    state = {
        "messages": [{"type": "human", "content": QUESTION}, {"type": "ai", "content": ANSWER}]
    }
    llm = "llm.output_messages.0.message"
    return [
        span(
            "1",
            None,
            0,
            "LangGraph",
            **{"openinference.span.kind": "CHAIN"},
            **{"output.value": json.dumps(state), "session.id": "s1"},
        ),
        span(
            "2",
            "1",
            1,
            "agent",
            **{
                "openinference.span.kind": "AGENT",
                "output.value": json.dumps(state),
                "output.mime_type": "application/json",
            },
        ),
        span(
            "3",
            "2",
            2,
            "ChatOpenAI",
            **{
                "openinference.span.kind": "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": QUESTION,
                f"{llm}.role": "assistant",
                f"{llm}.tool_calls.0.tool_call.id": "call_1",
                f"{llm}.tool_calls.0.tool_call.function.name": "get_weather",
                f"{llm}.tool_calls.0.tool_call.function.arguments": json.dumps(ARGS),
                "llm.token_count.prompt": 50,
                "llm.token_count.completion": 10,
            },
        ),
        span(
            "4",
            "1",
            20,
            "get_weather",
            **{
                "openinference.span.kind": "TOOL",
                "tool.name": "get_weather",
                "input.value": json.dumps(ARGS),
                "output.value": json.dumps(tool_output)
                if isinstance(tool_output, dict)
                else tool_output,
            },
        ),
        span(
            "5",
            "2",
            40,
            "ChatOpenAI",
            **{
                "openinference.span.kind": "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": QUESTION,
                f"{llm}.role": "assistant",
                f"{llm}.content": ANSWER,
                "llm.token_count.prompt": 80,
                "llm.token_count.completion": 12,
            },
        ),
    ]


def test_openinference_starter_reads_langgraph_state_and_tool_message():
    result = build(langgraph_spans(), load_starter("openinference"))
    assert result.answer == ANSWER
    calls, results = calls_and_results(result)
    assert [(c["function_name"], c["arguments"]) for c in calls] == [("get_weather", ARGS)]
    assert results == [RESULT]
    assert sources(result).count("user") == 1
    assert result.findings == []


def test_the_old_openinference_mapping_gives_the_state_and_the_envelope_and_check_says_so():
    old = copy.deepcopy(load_starter("openinference"))
    for source in old["answer"]:
        source.pop("plain_text", None)
    old["tool"]["result"] = ["output.value"]
    result = build(langgraph_spans(), old)
    assert json.loads(result.answer)["messages"]
    found = {f.rule: f for f in result.findings}
    assert set(found) == {"answer-is-json", "tool-result-envelope"}
    assert '"plain_text": true' in found["answer-is-json"].message
    assert found["answer-is-json"].span_id == "2" * 16
    envelope = found["tool-result-envelope"]
    assert envelope.attribute == "output.value" and envelope.span_id == "4" * 16
    assert '{"attribute": "output.value", "path": "content"}' in envelope.message


def test_a_serialized_langchain_message_is_an_envelope_too():
    serialized = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "ToolMessage"],
        "kwargs": {**TOOL_MESSAGE},
    }
    result = build(langgraph_spans(serialized), load_starter("openinference"))
    assert calls_and_results(result)[1] == [RESULT]
    old = {**load_starter("openinference"), "tool": {"name": "tool.name", "result": "output.value"}}
    assert "tool-result-envelope" in rules(build(langgraph_spans(serialized), old))


def test_a_tool_returning_plain_text_or_its_own_json_is_no_envelope():
    result = build(langgraph_spans(RESULT), load_starter("openinference"))
    assert calls_and_results(result)[1] == [RESULT] and result.findings == []
    own = {"city": "Paris", "content": "cloudy"}  # a tool's own object: no envelope mark
    result = build(langgraph_spans(own), load_starter("openinference"))
    assert json.loads(calls_and_results(result)[1][0]) == own
    assert result.findings == []


# --------------------------------------------------------------------------- Pydantic AI shape


def pydantic_spans(result_key: str = "result") -> list[Span]:
    """GenAI parts as Pydantic AI sends them: the tool's return comes back as a user message
    holding only a tool_call_response part, its payload under ``result``."""
    question = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    asked = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": ARGS}],
    }
    returned = {
        "role": "user",
        "parts": [
            {
                "type": "tool_call_response",
                "id": "call_1",
                "name": "get_weather",
                result_key: RESULT,
            }
        ],
    }
    answer = {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}
    return [
        span(
            "1",
            None,
            0,
            "invoke_agent agent",
            **{"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "s1"},
        ),
        span(
            "2",
            "1",
            1,
            "chat gpt-4o-mini",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([question]),
                "gen_ai.output.messages": json.dumps([asked]),
                "gen_ai.usage.input_tokens": 50,
                "gen_ai.usage.output_tokens": 10,
            },
        ),
        span(
            "3",
            "1",
            30,
            "chat gpt-4o-mini",
            **{
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([question, asked, returned]),
                "gen_ai.output.messages": json.dumps([answer]),
                "gen_ai.usage.input_tokens": 80,
                "gen_ai.usage.output_tokens": 12,
            },
        ),
    ]


@pytest.mark.parametrize("key", ["result", "response"])
def test_genai_starter_reads_tool_returns_sent_as_user_messages(key):
    result = build(pydantic_spans(key), load_starter("genai"))
    assert sources(result) == ["user", "agent", "agent"]
    calls, results = calls_and_results(result)
    assert [(c["function_name"], c["arguments"]) for c in calls] == [("get_weather", ARGS)]
    assert results == [RESULT]
    assert result.answer == ANSWER and result.findings == []


def test_without_drop_empty_the_tool_return_is_an_empty_user_step_and_check_says_so():
    old = copy.deepcopy(load_starter("genai"))
    for source in old["llm"]["input_messages"]:
        source.pop("drop_empty", None)
    result = build(pydantic_spans(), old)
    assert sources(result) == ["user", "agent", "user", "agent"]
    [finding] = result.findings
    assert finding.rule == "empty-user-step" and finding.span_id == "3" * 16
    assert finding.attribute == "gen_ai.input.messages[2]"
    assert '"drop_empty": true' in finding.message


def test_roles_are_renamed_as_read():
    mapping = copy.deepcopy(load_starter("genai"))
    mapping["llm"]["input_messages"][0]["roles"] = {"human": "user"}
    spans = pydantic_spans()
    for s in spans:
        if "gen_ai.input.messages" in s.attributes:
            s.attributes["gen_ai.input.messages"] = s.attributes["gen_ai.input.messages"].replace(
                '"role": "user", "parts": [{"type": "text"',
                '"role": "human", "parts": [{"type": "text"',
            )
    assert '"human"' in spans[1].attributes["gen_ai.input.messages"]
    assert sources(build(spans, mapping))[0] == "user"
    assert "user" not in sources(build(spans, load_starter("genai")))


# --------------------------------------------------------------------------- Vercel AI SDK shape


def vercel_spans() -> list[Span]:
    """The AI SDK's telemetry: ai.generateText around two doGenerate calls and an ai.toolCall;
    plain-text replies, tool calls apart, the tool's result JSON-quoted."""
    meta = {"ai.telemetry.metadata.sessionId": "s1", "ai.telemetry.functionId": "weather"}
    user = {"role": "user", "content": [{"type": "text", "text": QUESTION}]}
    asked = {
        "role": "assistant",
        "content": [
            {"type": "tool-call", "toolCallId": "call_1", "toolName": "get_weather", "input": ARGS}
        ],
    }
    returned = {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "call_1",
                "toolName": "get_weather",
                "output": {"type": "text", "value": RESULT},
            }
        ],
    }
    return [
        span(
            "1",
            None,
            0,
            "ai.generateText",
            **meta,
            **{
                "ai.operationId": "ai.generateText",
                "ai.prompt": json.dumps({"prompt": QUESTION}),
                "ai.response.text": ANSWER,
                "ai.usage.inputTokens": 130,
                "ai.usage.outputTokens": 22,
            },
        ),
        span(
            "2",
            "1",
            1,
            "ai.generateText.doGenerate",
            **meta,
            **{
                "ai.operationId": "ai.generateText.doGenerate",
                "ai.prompt.messages": json.dumps([user]),
                "ai.response.toolCalls": json.dumps(
                    [
                        {
                            "toolCallType": "function",
                            "toolCallId": "call_1",
                            "toolName": "get_weather",
                            "input": json.dumps(ARGS),
                        }
                    ]
                ),
                "ai.response.model": "gpt-4o-mini",
                "ai.usage.inputTokens": 50,
                "ai.usage.outputTokens": 10,
            },
        ),
        span(
            "3",
            "1",
            20,
            "ai.toolCall",
            **meta,
            **{
                "ai.operationId": "ai.toolCall",
                "ai.toolCall.name": "get_weather",
                "ai.toolCall.id": "call_1",
                "ai.toolCall.args": json.dumps(ARGS),
                "ai.toolCall.result": json.dumps(RESULT),
            },
        ),
        span(
            "4",
            "1",
            40,
            "ai.generateText.doGenerate",
            **meta,
            **{
                "ai.operationId": "ai.generateText.doGenerate",
                "ai.prompt.messages": json.dumps([user, asked, returned]),
                "ai.response.text": ANSWER,
                "ai.response.model": "gpt-4o-mini",
                "ai.usage.inputTokens": 80,
                "ai.usage.outputTokens": 12,
            },
        ),
    ]


@pytest.mark.parametrize("starter", ["vercel-ai", "auto"])
def test_vercel_starter_reads_text_replies_tool_calls_and_quoted_results(starter):
    result = build(vercel_spans(), load_starter(starter))
    assert sources(result) == ["user", "agent", "agent"]
    calls, results = calls_and_results(result)
    assert [(c["function_name"], c["arguments"]) for c in calls] == [("get_weather", ARGS)]
    assert results == [RESULT]
    assert result.answer == ANSWER
    metrics = [s.get("metrics", {}) for s in result.trajectory["steps"]]
    assert sum(m.get("prompt_tokens", 0) for m in metrics) == 130
    assert sum(m.get("completion_tokens", 0) for m in metrics) == 22
    assert result.trajectory["agent"]["model_name"] == "gpt-4o-mini"
    assert result.findings == [] and result.unread == []


def test_the_results_of_later_calls_are_read_when_no_tool_span_answers():
    spans = [s for s in vercel_spans() if s.name != "ai.toolCall"]
    assert calls_and_results(build(spans, load_starter("vercel-ai")))[1] == [RESULT]


def test_genai_starter_on_vercel_spans_reads_nothing_and_names_the_starter():
    result = build(vercel_spans(), load_starter("genai"))
    [finding] = result.findings
    assert finding.rule == "nothing-read" and "vercel-ai" in finding.message


def test_spans_of_a_convention_no_rule_matches_are_named():
    mapping = copy.deepcopy(load_starter("openinference"))
    mapping["span_kinds"]["tool"] = []
    mapping["tool"] = {}
    result = build(langgraph_spans(RESULT), mapping)
    [finding] = result.findings
    assert finding.rule == "unclassified-span" and finding.span_id == "4" * 16
    assert finding.attribute == "openinference.span.kind"
    assert '"values": ["TOOL"]' in finding.message


@pytest.mark.parametrize("starter", ["openinference", "genai"])
def test_auto_reads_each_convention_as_its_starter_does(starter):
    spans = langgraph_spans() if starter == "openinference" else pydantic_spans()
    own, auto = build(spans, load_starter(starter)), build(spans, load_starter("auto"))
    assert auto.trajectory["steps"] == own.trajectory["steps"]
    assert auto.answer == own.answer and auto.findings == []


# --------------------------------------------------------------------------- references


def ref_mapping(rule: Any, **answer: Any) -> dict[str, Any]:
    mapping = copy.deepcopy(load_starter("openinference"))
    mapping["answer"] = [{"span": "root", "attribute": rule, **answer}]
    return mapping


@pytest.mark.parametrize(
    ("value", "rule", "expected"),
    [
        (
            '{"messages": [{"c": "a"}, {"c": "b"}]}',
            {"attribute": "out", "path": "messages.-1.c"},
            "b",
        ),
        ('{"messages": [{"c": "a"}]}', {"attribute": "out", "path": ["messages", 0, "c"]}, "a"),
        ('{"a.b": "dotted"}', {"attribute": "out", "path": ["a.b"]}, "dotted"),
        ('"quoted"', {"attribute": "out", "json": True}, "quoted"),
        (
            '{"type": "tool", "content": "x"}',
            {"attribute": "out", "path": "content", "where": {"type": "tool"}},
            "x",
        ),
        (
            '{"type": "other", "content": "x"}',
            [{"attribute": "out", "path": "content", "where": {"type": "tool"}}, "fallback"],
            "fb",
        ),
        ("not json", [{"attribute": "out", "json": True}, "fallback"], "fb"),
        ('{"a": 1}', [{"attribute": "out", "path": "b"}, "fallback"], "fb"),
        ('{"a": [1]}', [{"attribute": "out", "path": "a.5"}, "fallback"], "fb"),
    ],
)
def test_references_into_json_attributes(value, rule, expected):
    spans = [span("1", None, 0, "root", out=value, fallback="fb")]
    assert build(spans, ref_mapping(rule)).answer == expected


def test_plain_text_passes_over_json_values_only():
    state = span("1", None, 0, "root", out='{"messages": []}')
    text = span("1", None, 0, "root", out="just text")
    mapping = ref_mapping("out", plain_text=True)
    assert build([state], mapping).answer is None
    assert build([text], mapping).answer == "just text"


@pytest.mark.parametrize(
    ("change", "path", "rule"),
    [
        ({"session_id": [{"attribute": "x", "path": "a"}]}, "session_id[0]", "plain-names-only"),
        (
            {"answer": [{"span": "root", "attribute": {"attribute": "x", "path": ""}}]},
            "answer[0].attribute.path",
            "empty",
        ),
        (
            {"answer": [{"span": "root", "attribute": {"attribute": "x", "path": "a..b"}}]},
            "answer[0].attribute.path",
            "empty",
        ),
        (
            {"answer": [{"span": "root", "attribute": {"attribute": " "}}]},
            "answer[0].attribute.attribute",
            "empty",
        ),
        (
            {"answer": [{"span": "root", "attribute": {"attribute": "x", "paht": "a"}}]},
            "answer[0].attribute.paht",
            "unknown-key",
        ),
        (
            {"answer": [{"span": "root", "attribute": {"attribute": "x", "where": {"": 1}}}]},
            "answer[0].attribute.where",
            "empty-key",
        ),
        (
            {"answer": [{"span": "root", "attribute": [{"attribute": "x", "path": "a"}] * 2}]},
            "answer[0].attribute",
            "duplicate",
        ),
        (
            {"answer": [{"span": "root", "attribute": "x", "plain_text": "yes"}]},
            "answer[0].plain_text",
            "bad-type",
        ),
        ({"llm__output_messages": [{"form": "text"}]}, "llm.output_messages[0]", "empty"),
        (
            {"llm__output_messages": [{"form": "text", "attribute": "t", "role": "bot"}]},
            "llm.output_messages[0].role",
            "bad-value",
        ),
        (
            {"llm__input_messages": [{"form": "parts", "attribute": "m", "roles": {"h": "human"}}]},
            "llm.input_messages[0].roles.h",
            "bad-value",
        ),
        (
            {"llm__input_messages": [{"form": "parts", "attribute": "m", "drop_empty": 1}]},
            "llm.input_messages[0].drop_empty",
            "bad-type",
        ),
    ],
)
def test_new_keys_are_checked_with_path_rule_and_fix(change, path, rule):
    mapping = copy.deepcopy(load_starter("openinference"))
    for dotted, value in change.items():
        node = mapping
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    errors = validate_mapping(mapping)
    assert (path, rule) in [(e.path, e.rule) for e in errors], errors
    assert all(e.message for e in errors)


def test_every_starter_is_valid():
    for name in ("openinference", "genai", "vercel-ai", "auto"):
        assert validate_mapping(load_starter(name)) == [], name


def test_auto_holds_every_rule_and_source_of_the_three_starters():
    auto = load_starter("auto")
    for name in ("openinference", "genai", "vercel-ai"):
        own = load_starter(name)
        for kind in ("llm", "tool", "agent"):
            assert all(r in auto["span_kinds"][kind] for r in own["span_kinds"][kind]), name
        for key in ("input_messages", "output_messages", "model"):
            assert all(x in auto["llm"][key] for x in own["llm"][key]), (name, key)
        for key, rules in own["llm"]["usage"].items():
            if key != "extra":
                assert all(x in auto["llm"]["usage"][key] for x in rules), (name, key)
        for key, rules in own["tool"].items():
            assert all(x in auto["tool"][key] for x in rules), (name, key)
        assert all(x in auto["session_id"] for x in own["session_id"]), name
        assert all(x in auto["answer"] for x in own["answer"]), name
