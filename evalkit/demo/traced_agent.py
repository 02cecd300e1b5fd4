"""The demo's traced agent: it runs in the SDK's process and reports what it did only as
OpenTelemetry spans in OpenInference conventions, so the server builds its trajectory from
the spans (the SDK path of the docs, with tracing). Its "model" is the reference harness's
calculator: deterministic, no LLM behind it."""

from __future__ import annotations

import json
from typing import Any

from evalkit.harness._agent import MODEL_NAME, solve

SYSTEM = "You answer arithmetic questions with the calculator tool."
CALL = "llm.output_messages.0.message.tool_calls.0.tool_call"


def _llm_attributes(question: str, step: int) -> dict[str, Any]:
    return {
        "openinference.span.kind": "LLM",
        "llm.model_name": MODEL_NAME,
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": SYSTEM,
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": question,
        "llm.output_messages.0.message.role": "assistant",
        "llm.token_count.prompt": 40 + 10 * step,
        "llm.token_count.completion": 12,
    }


def answer(input: dict[str, Any]) -> str:
    """The SDK task: one AGENT span; an LLM span asking for the calculator, the TOOL span,
    and an LLM span with the answer (or a single LLM span when there is nothing to compute)."""
    from opentelemetry import trace

    tracer = trace.get_tracer("evalkit.demo")
    work = solve(input, [])
    agent_attrs = {"openinference.span.kind": "AGENT", "input.value": work.question}
    with tracer.start_as_current_span("calculator-agent", attributes=agent_attrs) as root:
        if work.expression is not None:
            ask = _llm_attributes(work.question, 0)
            ask[f"{CALL}.id"] = "call_1"
            ask[f"{CALL}.function.name"] = "calculator"
            ask[f"{CALL}.function.arguments"] = json.dumps({"expression": work.expression})
            with tracer.start_as_current_span("ChatCompletion", attributes=ask):
                pass
            tool = {
                "openinference.span.kind": "TOOL",
                "tool.name": "calculator",
                "tool_call.id": "call_1",
                "input.value": json.dumps({"expression": work.expression}),
                "output.value": str(work.result),
            }
            with tracer.start_as_current_span("calculator", attributes=tool):
                pass
        final = _llm_attributes(work.question, 1)
        final["llm.output_messages.0.message.content"] = work.answer
        with tracer.start_as_current_span("ChatCompletion", attributes=final):
            pass
        root.set_attribute("output.value", work.answer)
    return work.answer
