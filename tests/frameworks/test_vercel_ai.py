"""A real Vercel AI SDK agent (tests/frameworks/vercel_ai/agent.mjs: ``generateText`` or
``streamText`` with one tool, ``@ai-sdk/openai``'s chat model against the fake model), traced
by the SDK's own OpenTelemetry spans (``experimental_telemetry``), exported to the real edge
by the OTel JS SDK over OTLP/HTTP, protobuf or JSON; the trajectory the shipped ``vercel-ai``
starter builds from its spans must be the agent's turn as it happened.

The SDK records usage on the outer ``ai.generateText``/``ai.streamText`` span (the turn's
total) and on each ``...doGenerate``/``...doStream`` span (one model call): only the per-call
figures may count, so the steps' tokens add up to the fake model's two replies."""

from __future__ import annotations

import pytest

from evalkit.otel.mapping import load_starter
from tests.frameworks.fake_model import (
    ANSWER,
    ANSWER_USAGE,
    CALL_ID,
    TOOL_ARGS,
    TOOL_CALL_USAGE,
    FakeModel,
)
from tests.frameworks.harness import observation_of, run_framework, steps, token_sums, tool_calls
from tests.frameworks.node import run_node_agent

QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "18°C, cloudy in Paris"

MODES = pytest.mark.parametrize(
    ("stream", "protocol"),
    [(False, "protobuf"), (False, "json"), (True, "protobuf"), (True, "json")],
    ids=["generate-protobuf", "generate-json", "stream-protobuf", "stream-json"],
)


def _run(server, admin_token, stream: bool, protocol: str) -> tuple[dict, FakeModel]:
    mapping = load_starter("vercel-ai")
    with FakeModel() as model:
        report = run_framework(
            server,
            admin_token,
            part="vercel_ai",
            script="agent.mjs",
            env={
                "FAKE_MODEL_URL": model.base_url,
                "FAKE_MODEL_STREAM": "1" if stream else "0",
                "OTLP_PROTOCOL": protocol,
            },
            mapping=mapping,
            runner=lambda env: run_node_agent("vercel_ai", "agent.mjs", env),
        )
    return report, model


@MODES
def test_vercel_ai_trajectory(server, admin_token, stream, protocol):
    report, model = _run(server, admin_token, stream, protocol)
    assert len(model.requests) == 2
    assert report["trajectory_valid"] is True, report["trajectory_errors"]

    users = [s for s in steps(report) if s["source"] == "user"]
    assert len(users) == 1, users
    assert users[0]["message"] == QUESTION

    calls = tool_calls(report)
    assert len(calls) == 1, calls
    step, call = calls[0]
    assert step["source"] == "agent"
    assert call["function_name"] == "get_weather"
    assert call["arguments"] == TOOL_ARGS
    assert isinstance(call["arguments"], dict)
    assert call["tool_call_id"] == CALL_ID
    [result] = observation_of(report, call["tool_call_id"])
    assert result["content"] == TOOL_RESULT

    assert report["answer"] == ANSWER
    prompt = TOOL_CALL_USAGE["prompt_tokens"] + ANSWER_USAGE["prompt_tokens"]
    completion = TOOL_CALL_USAGE["completion_tokens"] + ANSWER_USAGE["completion_tokens"]
    assert (prompt, completion) == (130, 22)
    assert token_sums(report) == (prompt, completion)


@MODES
def test_vercel_ai_nothing_unread(server, admin_token, stream, protocol):
    report, _ = _run(server, admin_token, stream, protocol)
    assert report["unread"] == []
