"""Small fake agents traced with the real OpenTelemetry SDK, one per convention, and the
ATIF trajectory evalkit should build from their spans.

Each agent answers "What is the weather in Paris?" with one tool call: an LLM call that asks
for ``get_weather``, the tool, and a second LLM call with the answer. Times are explicit so
the expected trajectories are exact. ``to_span`` converts the SDK's finished spans into
evalkit's stored :class:`~evalkit.otel.model.Span` (the collector has its own OTLP decoder).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from evalkit.otel.model import Span, SpanEvent

T0 = 1_767_258_000_000_000_000
"""2026-01-01T09:00:00Z in nanoseconds."""
MS = 1_000_000

SYSTEM = "You are a weather bot."
QUESTION = "What is the weather in Paris?"
REASONING = "I should look the weather up."
ARGS = {"city": "Paris"}
RESULT = "18°C, cloudy"
ANSWER = "It is 18°C and cloudy in Paris."
MODEL = "gpt-4o-mini-2024-07-18"
CALL = "llm.output_messages.0.message.tool_calls.0.tool_call"


def tracer_and_exporter(service_version: str = "1.2.0") -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "weather-agent", "service.version": service_version}
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("tests.otel_agents"), exporter


@contextmanager
def timed(
    tracer: Tracer, name: str, start_ms: int, end_ms: int, **attributes: Any
) -> Iterator[Any]:
    """A span from T0 + start_ms to T0 + end_ms, current while the block runs."""
    with tracer.start_as_current_span(
        name, start_time=T0 + start_ms * MS, attributes=attributes, end_on_exit=False
    ) as span:
        yield span
    span.end(end_time=T0 + end_ms * MS)


def to_span(sdk: ReadableSpan) -> Span:
    """An SDK span as evalkit stores it (OTLP numbering for kind and status)."""
    ctx = sdk.context
    assert ctx is not None and sdk.start_time is not None and sdk.end_time is not None
    return Span(
        trace_id=f"{ctx.trace_id:032x}",
        span_id=f"{ctx.span_id:016x}",
        parent_span_id=f"{sdk.parent.span_id:016x}" if sdk.parent else None,
        name=sdk.name,
        kind=sdk.kind.value + 1,  # the SDK counts INTERNAL from 0, OTLP from 1
        start_ns=sdk.start_time,
        end_ns=sdk.end_time,
        attributes=_plain(dict(sdk.attributes or {})),
        events=[
            SpanEvent(name=e.name, time_ns=e.timestamp, attributes=_plain(dict(e.attributes or {})))
            for e in sdk.events
        ],
        status_code=sdk.status.status_code.value,
        status_message=sdk.status.description,
        resource=_plain(dict(sdk.resource.attributes)),
        scope=sdk.instrumentation_scope.name if sdk.instrumentation_scope else None,
    )


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def spans_of(exporter: InMemorySpanExporter) -> list[Span]:
    return [to_span(s) for s in exporter.get_finished_spans()]


def by_name(spans: list[Span], name: str) -> Span:
    (span,) = [s for s in spans if s.name == name]
    return span


# --------------------------------------------------------------------------- OpenInference


def openinference_agent(tracer: Tracer, session: str = "sess-oi", *, tool_ok: bool = True) -> None:
    """AGENT root with session.id; LLM (tool call) -> TOOL -> LLM (answer)."""
    common = {"session.id": session}
    with timed(
        tracer,
        "weather-agent",
        0,
        1000,
        **common,
        **{"openinference.span.kind": "AGENT", "input.value": QUESTION, "agent.name": "weather"},
    ) as root:
        with timed(
            tracer,
            "ChatCompletion",
            10,
            300,
            **common,
            **{
                "openinference.span.kind": "LLM",
                "llm.model_name": MODEL,
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": SYSTEM,
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": QUESTION,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.contents.0.message_content.type": "reasoning",
                "llm.output_messages.0.message.contents.0.message_content.text": REASONING,
                f"{CALL}.id": "call_1",
                f"{CALL}.function.name": "get_weather",
                f"{CALL}.function.arguments": json.dumps(ARGS),
                "llm.token_count.prompt": 120,
                "llm.token_count.completion": 20,
                "llm.token_count.prompt_details.cache_read": 100,
                "llm.token_count.completion_details.reasoning": 8,
                "llm.cost.total": 0.0004,
            },
        ):
            pass
        with timed(
            tracer,
            "get_weather",
            310,
            400,
            **common,
            **{
                "openinference.span.kind": "TOOL",
                "tool.name": "get_weather",
                "tool.parameters": json.dumps(ARGS),
                "input.value": json.dumps(ARGS),
            },
        ) as tool:
            if tool_ok:
                tool.set_attribute("output.value", RESULT)
            else:
                tool.set_status(Status(StatusCode.ERROR, "weather service down"))
        with timed(
            tracer,
            "ChatCompletion",
            410,
            900,
            **common,
            **{
                "openinference.span.kind": "LLM",
                "llm.model_name": MODEL,
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": SYSTEM,
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": QUESTION,
                "llm.input_messages.2.message.role": "assistant",
                "llm.input_messages.2.message.tool_calls.0.tool_call.id": "call_1",
                "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "get_weather",
                "llm.input_messages.3.message.role": "tool",
                "llm.input_messages.3.message.tool_call_id": "call_1",
                "llm.input_messages.3.message.content": RESULT,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": ANSWER,
                "llm.token_count.prompt": 160,
                "llm.token_count.completion": 12,
                "llm.token_count.prompt_details.cache_read": 100,
                "llm.cost.total": 0.0002,
            },
        ):
            pass
        root.set_attribute("output.value", ANSWER)


# --------------------------------------------------------------------------- OTel GenAI

GENAI_FORMS = ("attributes", "details_event", "message_events")


def genai_agent(tracer: Tracer, form: str, session: str = "sess-genai") -> None:
    """invoke_agent root with gen_ai.conversation.id; chat -> execute_tool -> chat. ``form``:
    content on span attributes, on the operation details event, or the older per-message
    events (then the tool span records no result: it comes from the next call's input)."""
    common = {"gen_ai.conversation.id": session, "gen_ai.provider.name": "openai"}
    with timed(
        tracer,
        "invoke_agent weather",
        0,
        1000,
        **common,
        **{
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather",
            "gen_ai.agent.version": "0.9.1",
        },
    ):
        with timed(
            tracer, "chat gpt-4o-mini", 10, 300, **common, **_chat_attributes(120, 20)
        ) as c1:
            _genai_content(
                c1,
                form,
                inputs=[_user()],
                output={
                    "role": "assistant",
                    "parts": [
                        {"type": "reasoning", "content": REASONING},
                        {
                            "type": "tool_call",
                            "id": "call_1",
                            "name": "get_weather",
                            "arguments": ARGS,
                        },
                    ],
                    "finish_reason": "tool_call",
                },
            )
        tool_attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": json.dumps(ARGS),
        }
        if form != "message_events":
            tool_attributes["gen_ai.tool.call.result"] = RESULT
        with timed(tracer, "execute_tool get_weather", 310, 400, **common, **tool_attributes):
            pass
        with timed(
            tracer, "chat gpt-4o-mini", 410, 900, **common, **_chat_attributes(160, 12)
        ) as c2:
            _genai_content(
                c2,
                form,
                inputs=[
                    _user(),
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "id": "call_1",
                                "name": "get_weather",
                                "arguments": ARGS,
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "parts": [
                            {"type": "tool_call_response", "id": "call_1", "response": RESULT}
                        ],
                    },
                ],
                output={
                    "role": "assistant",
                    "parts": [{"type": "text", "content": ANSWER}],
                    "finish_reason": "stop",
                },
            )


def _user() -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}


def _chat_attributes(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": MODEL,
        "gen_ai.usage.input_tokens": prompt,
        "gen_ai.usage.output_tokens": completion,
        "gen_ai.usage.cache_read.input_tokens": 100,
    }


def _genai_content(span: Any, form: str, inputs: list[dict], output: dict) -> None:
    system = json.dumps([{"type": "text", "content": SYSTEM}])
    if form == "attributes":
        span.set_attribute("gen_ai.system_instructions", system)
        span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
        span.set_attribute("gen_ai.output.messages", json.dumps([output]))
    elif form == "details_event":
        span.add_event(
            "gen_ai.client.inference.operation.details",
            {
                "gen_ai.system_instructions": system,
                "gen_ai.input.messages": json.dumps(inputs),
                "gen_ai.output.messages": json.dumps([output]),
            },
            timestamp=T0 + 299 * MS,
        )
    else:
        span.add_event(
            "gen_ai.system.message", {"gen_ai.event.content": json.dumps({"content": SYSTEM})}
        )
        for message in inputs:
            span.add_event(f"gen_ai.{message['role']}.message", _old_event(message))
        choice = {
            "index": 0,
            "finish_reason": output["finish_reason"],
            "message": _old_body(output),
        }
        span.add_event("gen_ai.choice", {"gen_ai.event.content": json.dumps(choice)})


def _old_body(message: dict) -> dict[str, Any]:
    """A GenAI message in the older event body shape (content, tool_calls, id)."""
    body: dict[str, Any] = {}
    texts = [p["content"] for p in message["parts"] if p["type"] == "text"]
    if texts:
        body["content"] = "\n".join(texts)
    calls = [p for p in message["parts"] if p["type"] == "tool_call"]
    if calls:
        body["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for c in calls
        ]
    responses = [p for p in message["parts"] if p["type"] == "tool_call_response"]
    if responses:
        body = {"content": responses[0]["response"], "id": responses[0]["id"]}
    return body


def _old_event(message: dict) -> dict[str, Any]:
    return {"gen_ai.event.content": json.dumps(_old_body(message))}


# --------------------------------------------------------------------------- expected


def ts(ms: int) -> str:
    seconds, rest = divmod(ms, 1000)
    return f"2026-01-01T09:00:{seconds:02d}.{rest:03d}000Z"


def expected_trajectory(
    spans: list[Span],
    *,
    session: str,
    version: str,
    tool_span: str,
    llm_span: str,
    reasoning: bool = True,
    cost: bool = False,
    extra_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The trajectory of either fake agent, step by step."""
    llm1, llm2 = sorted((s for s in spans if s.name == llm_span), key=lambda s: s.start_ns)
    first: dict[str, Any] = {
        "step_id": 3,
        "timestamp": ts(300),
        "source": "agent",
        "model_name": MODEL,
        "message": "",
    }
    if reasoning:
        first["reasoning_content"] = REASONING
    first["tool_calls"] = [
        {"tool_call_id": "call_1", "function_name": "get_weather", "arguments": ARGS}
    ]
    first["observation"] = {"results": [{"source_call_id": "call_1", "content": RESULT}]}
    first["metrics"] = {"prompt_tokens": 120, "completion_tokens": 20, "cached_tokens": 100}
    second_metrics: dict[str, Any] = {
        "prompt_tokens": 160,
        "completion_tokens": 12,
        "cached_tokens": 100,
    }
    if cost:
        first["metrics"]["cost_usd"] = 0.0004
        second_metrics["cost_usd"] = 0.0002
    if extra_metrics:
        first["metrics"]["extra"] = extra_metrics
    first["llm_call_count"] = 1
    first["extra"] = {"span_id": llm1.span_id}
    final = {
        "total_prompt_tokens": 280,
        "total_completion_tokens": 32,
        "total_cached_tokens": 200,
    }
    if cost:
        final["total_cost_usd"] = 0.0006
    final["total_steps"] = 4
    return {
        "schema_version": "ATIF-v1.8",
        "session_id": session,
        "agent": {"name": "weather", "version": version, "model_name": MODEL},
        "steps": [
            {
                "step_id": 1,
                "timestamp": ts(10),
                "source": "system",
                "message": SYSTEM,
                "extra": {"span_id": llm1.span_id},
            },
            {
                "step_id": 2,
                "timestamp": ts(10),
                "source": "user",
                "message": QUESTION,
                "extra": {"span_id": llm1.span_id},
            },
            first,
            {
                "step_id": 4,
                "timestamp": ts(900),
                "source": "agent",
                "model_name": MODEL,
                "message": ANSWER,
                "metrics": second_metrics,
                "llm_call_count": 1,
                "extra": {"span_id": llm2.span_id},
            },
        ],
        "final_metrics": final,
        "extra": {
            "evalkit": {
                "built_from": "otel",
                "spans": len(spans),
                "spans_excluded": 0,
                "truncated": False,
            }
        },
    }
