"""Spans from the real OpenTelemetry SDK -> ATIF trajectories, with the starter mappings;
and every rule of the span mapping format."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import msgspec
import pytest

from evalkit.atif import validate_trajectory
from evalkit.otel.build import TRUNCATED_NOTE, build_trajectory
from evalkit.otel.mapping import (
    STARTERS,
    Mapping,
    MappingValidationError,
    load_starter,
    parse_mapping,
    validate_mapping,
)
from evalkit.otel.model import Span, SpanEvent, session_attribute_names, session_id_of
from tests.otel_agents import (
    ANSWER,
    ARGS,
    GENAI_FORMS,
    QUESTION,
    RESULT,
    SYSTEM,
    T0,
    by_name,
    expected_trajectory,
    genai_agent,
    openinference_agent,
    spans_of,
    timed,
    tracer_and_exporter,
)

OPENINFERENCE = parse_mapping(load_starter("openinference"))
GENAI = parse_mapping(load_starter("genai"))


def build(spans: list[Span], mapping: Mapping, **kw: Any):
    result = build_trajectory(
        spans, mapping, session_id=kw.pop("session_id", "s1"), agent_name="weather", **kw
    )
    assert validate_trajectory(result.trajectory) == [], result.trajectory
    return result


def oi_spans(**kw: Any) -> list[Span]:
    tracer, exporter = tracer_and_exporter()
    openinference_agent(tracer, **kw)
    return spans_of(exporter)


def genai_spans(form: str) -> list[Span]:
    tracer, exporter = tracer_and_exporter()
    genai_agent(tracer, form)
    return spans_of(exporter)


# --------------------------------------------------------------------------- conventions


def test_openinference_agent_trajectory_step_by_step():
    spans = oi_spans()
    assert len(spans) == 4
    result = build(spans, OPENINFERENCE, session_id="sess-oi")
    expected = expected_trajectory(
        spans,
        session="sess-oi",
        version="1.2.0",
        tool_span="get_weather",
        llm_span="ChatCompletion",
        cost=True,
        extra_metrics={"reasoning_tokens": 8},
    )
    for got, want in zip(result.trajectory["steps"], expected["steps"], strict=True):
        assert got == want
    assert result.trajectory == expected
    assert result.answer == ANSWER
    assert result.unread == []
    assert (result.steps, result.truncated, result.spans, result.excluded) == (4, False, 4, 0)


@pytest.mark.parametrize("form", GENAI_FORMS)
def test_genai_agent_trajectory_step_by_step(form):
    spans = genai_spans(form)
    result = build(spans, GENAI, session_id="sess-genai")
    expected = expected_trajectory(
        spans,
        session="sess-genai",
        version="0.9.1",
        tool_span="execute_tool get_weather",
        llm_span="chat gpt-4o-mini",
        reasoning=form != "message_events",  # the older events have no reasoning part
    )
    for got, want in zip(result.trajectory["steps"], expected["steps"], strict=True):
        assert got == want
    assert result.trajectory == expected
    assert result.answer == ANSWER
    assert result.unread == []


def test_genai_structured_values_read_like_json_strings():
    """OTLP may carry the messages as structured values (kvlist/array), not JSON text."""
    spans = genai_spans("attributes")
    structured = []
    for span in spans:
        attrs = {
            k: json.loads(v)
            if k.startswith("gen_ai.") and k.endswith(("messages", "instructions"))
            else v
            for k, v in span.attributes.items()
        }
        structured.append(msgspec.structs.replace(span, attributes=attrs))
    assert isinstance(by_name(structured, "invoke_agent weather").attributes, dict)
    assert any(isinstance(s.attributes.get("gen_ai.input.messages"), list) for s in structured)
    assert build(structured, GENAI).trajectory["steps"] == build(spans, GENAI).trajectory["steps"]


def test_session_ids_come_from_the_attribute_the_starter_names():
    oi, genai = oi_spans(), genai_spans("attributes")
    assert session_attribute_names(load_starter("openinference")) == ["session.id"]
    assert session_attribute_names(load_starter("genai")) == ["gen_ai.conversation.id"]
    assert {session_id_of(s, ["session.id"]) for s in oi} == {"sess-oi"}
    assert {session_id_of(s, ["gen_ai.conversation.id"]) for s in genai} == {"sess-genai"}


# --------------------------------------------------------------------------- determinism


def test_any_span_order_gives_the_same_bytes():
    for spans, mapping in ((oi_spans(), OPENINFERENCE), (genai_spans("message_events"), GENAI)):
        reference = msgspec.json.encode(build(spans, mapping).trajectory)
        rng = random.Random(7)
        for _ in range(10):
            shuffled = spans[:]
            rng.shuffle(shuffled)
            assert msgspec.json.encode(build(shuffled, mapping).trajectory) == reference
        # a span delivered twice (an exporter retry) is read once
        doubled = build(spans + spans[:2], mapping)
        assert msgspec.json.encode(doubled.trajectory) == reference


# --------------------------------------------------------------------------- exclude_spans


def guarded_spans() -> list[Span]:
    """The OpenInference agent plus a guardrail chain (with its own LLM call) in the root."""
    tracer, exporter = tracer_and_exporter()
    with timed(tracer, "session", 0, 2000, **{"session.id": "g"}):
        openinference_agent(tracer, "g")
        with (
            timed(tracer, "guardrail", 1100, 1500, **{"openinference.span.kind": "GUARDRAIL"}),
            timed(
                tracer,
                "moderation-llm",
                1110,
                1400,
                **{
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "moderator",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": "Is this answer safe?",
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "safe",
                    "llm.token_count.prompt": 9,
                    "llm.token_count.completion": 1,
                },
            ),
        ):
            pass
    return spans_of(exporter)


def test_exclude_spans_drops_the_matching_spans_and_their_children():
    spans = guarded_spans()
    kept = build(spans, OPENINFERENCE)
    assert [s["message"] for s in kept.trajectory["steps"]][-2:] == ["Is this answer safe?", "safe"]

    body = load_starter("openinference")
    body["exclude_spans"] = [
        {"attribute": "openinference.span.kind", "values": ["GUARDRAIL"]},
    ]
    result = build(spans, parse_mapping(body))
    assert result.excluded == 2 and result.spans == len(spans) - 2
    steps = result.trajectory["steps"]
    assert [s["message"] for s in steps] == [SYSTEM, QUESTION, "", ANSWER]
    assert result.trajectory["final_metrics"]["total_prompt_tokens"] == 280
    assert result.trajectory["extra"]["evalkit"]["spans_excluded"] == 2

    body["exclude_spans"] = [{"name": "moderation-*"}]
    by_glob = build(spans, parse_mapping(by_glob_body := body))
    assert by_glob.excluded == 1 and by_glob_body["exclude_spans"][0]["name"] == "moderation-*"
    assert len(by_glob.trajectory["steps"]) == 4


# --------------------------------------------------------------------------- unread


def test_a_tool_the_agent_ran_by_itself_takes_its_place_in_time():
    tracer, exporter = tracer_and_exporter()
    llm = {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": QUESTION,
        "llm.output_messages.0.message.role": "assistant",
    }
    with timed(tracer, "agent", 0, 1000, **{"openinference.span.kind": "AGENT"}):
        with timed(
            tracer, "llm-1", 10, 100, **llm, **{"llm.output_messages.0.message.content": "a"}
        ):
            pass
        with timed(tracer, "lone-tool", 150, 180, **{"openinference.span.kind": "TOOL"}):
            pass
        with timed(
            tracer, "llm-2", 200, 300, **llm, **{"llm.output_messages.0.message.content": "b"}
        ):
            pass
    spans = spans_of(exporter)
    steps = build(spans, OPENINFERENCE).trajectory["steps"]
    assert [s["extra"]["span_id"] for s in steps[1:]] == [
        by_name(spans, name).span_id for name in ("llm-1", "lone-tool", "llm-2")
    ]


def test_unread_names_each_missing_thing_with_its_span():
    tracer, exporter = tracer_and_exporter()
    with timed(tracer, "agent", 0, 1000, **{"openinference.span.kind": "AGENT"}):
        with timed(
            tracer,
            "llm-1",
            10,
            100,
            **{
                "openinference.span.kind": "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": QUESTION,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{oops",
            },
        ):
            pass
        with timed(
            tracer,
            "llm-2",
            200,
            300,
            **{
                "openinference.span.kind": "LLM",
                "llm.model_name": "m",
                "llm.output_messages.0.message.role": "assistant",
                "llm.token_count.prompt": 10,
                "llm.token_count.completion": 2,
                "llm.token_count.prompt_details.cache_read": 11,
            },
        ):
            pass
        with timed(tracer, "orphan-tool", 400, 500, **{"openinference.span.kind": "TOOL"}):
            pass
    spans = spans_of(exporter)
    llm1, llm2 = by_name(spans, "llm-1").span_id, by_name(spans, "llm-2").span_id
    tool = by_name(spans, "orphan-tool").span_id
    result = build(spans, OPENINFERENCE)
    assert result.unread == [
        f"span {llm1}: llm.response.model_name / llm.model_name / llm.request.model_name missing",
        f"span {llm1}: llm.output_messages.0.message.tool_calls.0 has no tool call id; made one up",
        f"span {llm1}: llm.output_messages.0.message.tool_calls.0 arguments is not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); kept "
        "as text under 'value'",
        f"span {llm1}: llm.token_count.prompt missing",
        f"span {llm1}: llm.token_count.completion missing",
        f"span {llm2}: input messages missing (llm.input_messages.<i>.*)",
        f"span {llm2}: llm.output_messages.0 has neither text nor tool calls",
        f"span {llm2}: cached tokens (11) exceed prompt tokens (10); the prompt count must "
        "include them, so cached_tokens went to metrics.extra",
        f"span {tool}: tool.name missing",
        f"span {tool}: output.value missing",
        f"span {llm1}: no result for tool call {llm1}-0 (lookup): no tool span answers it and no "
        "later LLM call sent its result",
        "answer: no answer source gave a value (the agent span: output.value; the root span: "
        "output.value; the last LLM call: its reply)",
    ]
    assert result.answer is None
    steps = result.trajectory["steps"]
    assert steps[1]["tool_calls"] == [
        {"tool_call_id": f"{llm1}-0", "function_name": "lookup", "arguments": {"value": "{oops"}}
    ]
    assert steps[2]["metrics"] == {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "extra": {"cached_tokens": 11},
    }
    # the tool span no LLM call asked for: a step of its own, with no LLM call
    assert steps[3] == {
        "step_id": 4,
        "timestamp": "2026-01-01T09:00:00.500000Z",
        "source": "agent",
        "message": "",
        "tool_calls": [{"tool_call_id": tool, "function_name": "orphan-tool", "arguments": {}}],
        "llm_call_count": 0,
        "extra": {"span_id": tool},
    }


def test_failed_tool_span_gives_its_error_as_the_result():
    spans = oi_spans(tool_ok=False)
    result = build(spans, OPENINFERENCE)
    step = result.trajectory["steps"][2]
    assert step["observation"] == {
        "results": [{"source_call_id": "call_1", "content": "error: weather service down"}]
    }


def test_result_from_the_next_llm_input_when_the_tool_span_has_none():
    spans = [
        msgspec.structs.replace(
            s, attributes={k: v for k, v in s.attributes.items() if k != "output.value"}
        )
        if s.name == "get_weather"
        else s
        for s in oi_spans()
    ]
    step = build(spans, OPENINFERENCE).trajectory["steps"][2]
    assert step["observation"]["results"] == [{"source_call_id": "call_1", "content": RESULT}]


def test_a_session_of_only_an_agents_span_gives_its_question_and_answer():
    # No LLM or tool span (their instrumentation not installed, or a hand-made agent span):
    # the agent span's input and output are the steps, and the note says why there are no
    # more.
    spans = [s for s in oi_spans() if s.attributes.get("openinference.span.kind") == "AGENT"]
    assert len(spans) == 1
    result = build(spans, OPENINFERENCE)
    steps = result.trajectory["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [
        ("user", "What is the weather in Paris?"),
        ("agent", "It is 18°C and cloudy in Paris."),
    ]
    assert result.answer == "It is 18°C and cloudy in Paris."
    assert result.unread == ["steps: no span is an LLM call or a tool (see span_kinds)"]
    assert validate_trajectory(result.trajectory) == []


def test_no_spans_still_give_a_valid_trajectory():
    result = build([], OPENINFERENCE)
    assert result.trajectory["steps"] == [
        {"step_id": 1, "source": "agent", "message": "", "llm_call_count": 0}
    ]
    assert result.unread[-1] == "steps: no span is an LLM call or a tool (see span_kinds)"


def test_truncated_is_passed_through_and_noted():
    result = build(oi_spans(), OPENINFERENCE, truncated=True)
    assert result.truncated is True
    assert result.trajectory["notes"] == TRUNCATED_NOTE
    assert result.trajectory["extra"]["evalkit"]["truncated"] is True


def test_input_fallback_and_repeated_tool_call_ids():
    """No LLM input carries the user's request: it comes from the agent span's input.value.
    Two calls reuse the id call_0 (some providers do): the second is made unique."""

    def llm(name: str, start: int, end: int, call: str | None, text: str | None) -> Span:
        attrs: dict[str, Any] = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "m",
            "llm.output_messages.0.message.role": "assistant",
            "llm.token_count.prompt": 5,
            "llm.token_count.completion": 1,
        }
        if call:
            prefix = "llm.output_messages.0.message.tool_calls.0.tool_call."
            attrs |= {f"{prefix}id": call, f"{prefix}function.name": "roll"}
        if text:
            attrs["llm.output_messages.0.message.content"] = text
        return Span(
            trace_id="a" * 32,
            span_id=name * 16,
            parent_span_id="0" * 16,
            name=name,
            start_ns=T0 + start,
            end_ns=T0 + end,
            attributes=attrs,
        )

    def tool(name: str, start: int, result: str) -> Span:
        return Span(
            trace_id="a" * 32,
            span_id=name * 16,
            parent_span_id="0" * 16,
            name="roll",
            start_ns=T0 + start,
            end_ns=T0 + start + 5,
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": "roll",
                "tool.id": "call_0",
                "output.value": result,
            },
        )

    root = Span(
        trace_id="a" * 32,
        span_id="0" * 16,
        name="agent",
        start_ns=T0,
        end_ns=T0 + 100,
        attributes={"openinference.span.kind": "AGENT", "input.value": "Roll twice"},
    )
    spans = [
        root,
        llm("1", 10, 20, "call_0", None),
        tool("2", 21, "4"),
        llm("3", 30, 40, "call_0", None),
        tool("4", 41, "6"),
        llm("5", 50, 60, None, "4 and 6"),
    ]
    result = build(spans, OPENINFERENCE)
    steps = result.trajectory["steps"]
    assert steps[0] == {
        "timestamp": "2026-01-01T09:00:00.000000Z",
        "step_id": 1,
        "source": "user",
        "message": "Roll twice",
        "extra": {"span_id": "0" * 16},
    }
    assert [s["tool_calls"][0]["tool_call_id"] for s in steps[1:3]] == ["call_0", "call_0#2"]
    assert [s["observation"]["results"] for s in steps[1:3]] == [
        [{"source_call_id": "call_0", "content": "4"}],
        [{"source_call_id": "call_0#2", "content": "6"}],
    ]
    assert result.answer == "4 and 6"  # the agent span has no output.value: the last reply


# --------------------------------------------------------------------------- the format


def test_starters_are_valid_and_cover_both_genai_forms():
    for name in STARTERS:
        assert validate_mapping(load_starter(name)) == []
    forms = [s["form"] for s in load_starter("genai")["llm"]["input_messages"]]
    assert forms[:2] == ["parts", "events"]
    with pytest.raises(ValueError, match="no starter mapping 'langfuse'"):
        load_starter("langfuse")


def errors_of(obj: object) -> list[tuple[str, str]]:
    return [(e.path, e.rule) for e in validate_mapping(obj)]


def starter_with(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(load_starter("openinference"))
    for dotted, value in changes.items():
        node = body
        *path, last = dotted.split("__")
        for part in path:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return body


@pytest.mark.parametrize(
    ("obj", "path", "rule", "words"),
    [
        ([], "", "bad-type", "a span mapping is a JSON object, not a list"),
        ({}, "", "empty", "start from `evalkit agents mapping starter openinference`"),
        (starter_with(session_id=5), "session_id", "bad-type", "an attribute name, a reference"),
        (starter_with(session_id=[]), "session_id", "empty", "give one name or a list"),
        (starter_with(session_id=[" "]), "session_id[0]", "empty", "empty attribute name"),
        (starter_with(session_id=["a", "a"]), "session_id", "duplicate", "names a twice"),
        (starter_with(sesion_id="x"), "sesion_id", "unknown-key", "did you mean 'session_id'?"),
        (starter_with(colour="x"), "colour", "unknown-key", "the keys here are agent_version"),
        (starter_with(answer=...), "answer", "missing-key", "is required; add it"),
        (starter_with(answer=[]), "answer", "empty", '{"span": "last_llm"}'),
        (
            starter_with(answer=[{"span": "root"}]),
            "answer[0].attribute",
            "missing-key",
            'is required with "span": "root"',
        ),
        (
            starter_with(answer=[{"span": "first_llm"}]),
            "answer[0].span",
            "bad-value",
            'use one of "agent", "last_llm", "root"',
        ),
        (starter_with(format=2), "format", "bad-format", "reads mapping format 1"),
        (starter_with(format="1"), "format", "bad-type", "a whole number, not a string"),
        (starter_with(span_kinds__llm=[]), "span_kinds.llm", "empty", "no span would count"),
        (starter_with(span_kinds__llm=[{}]), "span_kinds.llm[0]", "empty-match", 'give "name"'),
        (
            starter_with(span_kinds__tool=[{"values": ["TOOL"]}]),
            "span_kinds.tool[0].values",
            "values-without-attribute",
            'needs "attribute"',
        ),
        (
            starter_with(exclude_spans=[{"attribute": "x", "values": []}]),
            "exclude_spans[0].values",
            "empty",
            "no value equals",
        ),
        (
            starter_with(exclude_spans=[{"name": " "}]),
            "exclude_spans[0].name",
            "empty",
            "write the name to match",
        ),
        (
            starter_with(exclude_spans=[{"attribute": "x", "values": [{"a": 1}]}]),
            "exclude_spans[0].values[0]",
            "bad-type",
            "not an object",
        ),
        (
            starter_with(llm__input_messages=[{"form": "flat", "prefix": "x"}]),
            "llm.input_messages[0].form",
            "bad-form",
            'one of "indexed", "parts", "events"',
        ),
        (
            starter_with(llm__output_messages=[{"prefix": "x"}]),
            "llm.output_messages[0].form",
            "bad-form",
            "is missing",
        ),
        (
            starter_with(llm__input_messages=[{"form": "parts"}]),
            "llm.input_messages[0].attribute",
            "missing-key",
            "is required",
        ),
        (
            starter_with(llm__input_messages=[{"form": "indexed", "prefix": "p", "role": ""}]),
            "llm.input_messages[0].role",
            "empty",
            "write the key",
        ),
        (starter_with(llm__output_messages=[]), "llm.output_messages", "empty", "the starters"),
        (
            starter_with(
                llm__output_messages=[{"form": "parts", "attribute": "o", "system_attribute": "s"}]
            ),
            "llm.output_messages[0].system_attribute",
            "input-only",
            "move it to llm.input_messages",
        ),
        (
            starter_with(llm__input_messages=[{"form": "events", "events": {}}]),
            "llm.input_messages[0].events",
            "empty",
            "map event names to roles",
        ),
        (
            starter_with(llm__input_messages=[{"form": "events", "events": {"e": "bot"}}]),
            "llm.input_messages[0].events.e",
            "bad-value",
            '"assistant", "system", "tool", "user"',
        ),
        (
            starter_with(
                llm__input_messages=[{"form": "events", "events": {"e": "user"}, "body": ""}]
            ),
            "llm.input_messages[0].body",
            "empty",
            "use null",
        ),
        (
            starter_with(llm__usage__extra={"": ["a"]}),
            "llm.usage.extra",
            "empty-key",
            "name every entry",
        ),
        (starter_with(llm__usage__extra={"r": []}), "llm.usage.extra.r", "empty", "give one"),
        (starter_with(tool__name=[]), "tool.name", "missing-key", "when span_kinds.tool"),
        (
            starter_with(exclude_spans=[{"name": "x"}] * 300),
            "exclude_spans",
            "too-many",
            "the most is 256",
        ),
        (starter_with(session_id="x" * 2000), "session_id", "too-long", "the most is 1024"),
    ],
)
def test_each_mapping_rule_names_path_rule_and_fix(obj, path, rule, words):
    errors = validate_mapping(obj)
    assert (path, rule) in [(e.path, e.rule) for e in errors], errors
    (error,) = [e for e in errors if (e.path, e.rule) == (path, rule)]
    assert words in error.message, error.message


def test_every_problem_is_reported_at_once():
    body = starter_with(session_id=5, colour=1, answer=..., span_kinds__llm="LLM")
    assert errors_of(body) == [
        ("colour", "unknown-key"),
        ("session_id", "bad-type"),
        ("span_kinds.llm", "bad-type"),
        ("answer", "missing-key"),
    ]
    with pytest.raises(MappingValidationError) as caught:
        parse_mapping(body)
    assert len(caught.value.errors) == 4
    assert str(caught.value).startswith("invalid span mapping (4 problems): colour: [unknown-key]")


def test_short_mapping_uses_the_defaults():
    mapping = parse_mapping(
        {
            "session_id": "session.id",
            "span_kinds": {"llm": [{"attribute": "openinference.span.kind", "values": ["LLM"]}]},
            "llm": {
                "input_messages": [{"form": "indexed", "prefix": "llm.input_messages"}],
                "output_messages": [{"form": "indexed", "prefix": "llm.output_messages"}],
            },
            "answer": [{"span": "last_llm"}],
        }
    )
    result = build(oi_spans(), mapping)
    steps = result.trajectory["steps"]
    # no tool rule: the tool span is not read; the result comes from the tool message the
    # next LLM call sent
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent"]
    assert steps[2]["tool_calls"][0]["arguments"] == ARGS
    assert steps[2]["observation"]["results"] == [{"source_call_id": "call_1", "content": RESULT}]
    assert result.answer == ANSWER
    assert result.trajectory["agent"]["version"] == "1.2.0"  # service.version, the default


def test_older_genai_events_as_flat_attributes():
    """Some instrumentations put the event's fields in its attributes, not a JSON body."""
    span = Span(
        trace_id="b" * 32,
        span_id="c" * 16,
        name="chat m",
        start_ns=T0,
        end_ns=T0 + 5,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
        events=[
            SpanEvent(name="gen_ai.user.message", time_ns=T0, attributes={"content": QUESTION}),
            SpanEvent(
                name="gen_ai.choice",
                time_ns=T0 + 5,
                attributes={
                    "index": 0,
                    "finish_reason": "stop",
                    "message": json.dumps({"content": ANSWER}),
                },
            ),
        ],
    )
    result = build([span], GENAI)
    assert [(s["source"], s["message"]) for s in result.trajectory["steps"]] == [
        ("user", QUESTION),
        ("agent", ANSWER),
    ]
    assert result.answer == ANSWER
    assert result.trajectory["agent"]["model_name"] == "m"
    assert f"span {'c' * 16}: gen_ai.usage.input_tokens / gen_ai.usage.prompt_tokens missing" in (
        result.unread
    )


def test_the_docs_show_the_starters_as_shipped():
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "tracing.md").read_text()
    blocks = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if b.startswith("{")]
    shown = [json.loads(b) for b in blocks]
    assert shown == [load_starter(n) for n in ("openinference", "genai", "vercel-ai")]


def test_tool_spans_without_ids_answer_same_named_calls_in_order():
    """One LLM call asks for search twice; two tool spans without call ids answer them in
    turn; a third search span answers nothing and becomes a step of its own."""
    prefix = "llm.output_messages.0.message.tool_calls"

    def span(sid: str, start: int, attrs: dict[str, Any]) -> Span:
        return Span(
            trace_id="d" * 32,
            span_id=sid * 16,
            name=sid,
            start_ns=T0 + start,
            end_ns=T0 + start + 5,
            attributes=attrs,
        )

    llm = span(
        "1",
        0,
        {
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            f"{prefix}.0.tool_call.id": "a",
            f"{prefix}.0.tool_call.function.name": "search",
            f"{prefix}.1.tool_call.id": "b",
            f"{prefix}.1.tool_call.function.name": "search",
        },
    )
    tools = [
        span(
            n,
            start,
            {"openinference.span.kind": "TOOL", "tool.name": "search", "output.value": out},
        )
        for n, start, out in (("2", 10, "first"), ("3", 20, "second"), ("4", 30, "third"))
    ]
    steps = build([llm, *tools], OPENINFERENCE).trajectory["steps"]
    assert steps[0]["observation"]["results"] == [
        {"source_call_id": "a", "content": "first"},
        {"source_call_id": "b", "content": "second"},
    ]
    assert steps[1]["llm_call_count"] == 0
    assert steps[1]["observation"]["results"] == [{"source_call_id": "4" * 16, "content": "third"}]
