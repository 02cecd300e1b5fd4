"""A real LangGraph ReAct agent (langgraph.prebuilt.create_react_agent, ChatOpenAI against the
fake model), traced by OpenInference's LangChain instrumentation, exported to the real edge
over OTLP/HTTP; the trajectory the shipped ``openinference`` starter builds from its spans
must be the agent's turn as it happened."""

from __future__ import annotations

import pytest

from evalkit.otel.mapping import load_starter
from tests.frameworks.fake_model import CALL_ID, FakeModel
from tests.frameworks.harness import assert_weather_turn, run_framework, tool_calls


def _run(server, admin_token, stream: bool) -> tuple[dict, FakeModel]:
    with FakeModel() as model:
        report = run_framework(
            server,
            admin_token,
            part="langgraph",
            script="agent.py",
            env={"FAKE_MODEL_URL": model.base_url, "FAKE_MODEL_STREAM": "1" if stream else "0"},
            mapping=load_starter("openinference"),
        )
    return report, model


@pytest.mark.parametrize("stream", [False, True], ids=["nostream", "stream"])
def test_langgraph_turn(server, admin_token, stream):
    report, model = _run(server, admin_token, stream)
    assert_weather_turn(report, model.requests)
    [(_, call)] = tool_calls(report)
    assert call["tool_call_id"] == CALL_ID
