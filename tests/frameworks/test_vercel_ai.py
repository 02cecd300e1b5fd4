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
from tests.frameworks.fake_model import CALL_ID, FakeModel
from tests.frameworks.harness import assert_weather_turn, run_framework, tool_calls
from tests.frameworks.node import run_node_agent

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
def test_vercel_ai_turn(server, admin_token, stream, protocol):
    report, model = _run(server, admin_token, stream, protocol)
    assert_weather_turn(report, model.requests)
    [(_, call)] = tool_calls(report)
    assert call["tool_call_id"] == CALL_ID
