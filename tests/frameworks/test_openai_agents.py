"""A real OpenAI Agents SDK agent (an Agent with one function tool, OpenAIChatCompletionsModel
against the fake model), traced by OpenInference's OpenAI Agents instrumentation, exported to
the real edge over OTLP/HTTP; the trajectory the shipped ``openinference`` starter builds from
its spans must be the agent's turn as it happened, streamed (Runner.run_streamed) or not."""

from __future__ import annotations

import pytest

from evalkit.otel.mapping import load_starter
from tests.frameworks.fake_model import FakeModel
from tests.frameworks.harness import assert_weather_turn, run_framework


def _run(server, admin_token, stream: bool) -> tuple[dict, list[dict]]:
    with FakeModel() as model:
        report = run_framework(
            server,
            admin_token,
            part="openai_agents",
            script="agent.py",
            env={"FAKE_MODEL_URL": model.base_url, "FAKE_MODEL_STREAM": "1" if stream else "0"},
            mapping=load_starter("openinference"),
        )
    return report, model.requests


@pytest.mark.parametrize("stream", [False, True], ids=["nostream", "stream"])
def test_openai_agents_turn(server, admin_token, stream):
    report, requests = _run(server, admin_token, stream)
    assert_weather_turn(report, requests)
