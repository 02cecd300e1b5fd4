"""A real OpenAI Agents SDK agent (an Agent with one function tool, OpenAIChatCompletionsModel
against the fake model), traced by OpenInference's OpenAI Agents instrumentation, exported to
the real edge over OTLP/HTTP; the trajectory the shipped ``openinference`` starter builds from
its spans must be the agent's turn as it happened, streamed (Runner.run_streamed) or not."""

from __future__ import annotations

import pytest

from evalkit.otel.mapping import load_starter
from tests.frameworks.fake_model import (
    ANSWER,
    ANSWER_USAGE,
    TOOL_ARGS,
    TOOL_CALL_USAGE,
    FakeModel,
)
from tests.frameworks.harness import observation_of, run_framework, steps, token_sums, tool_calls

QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "18°C, cloudy in Paris"


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
def test_openai_agents_trajectory(server, admin_token, stream):
    report, requests = _run(server, admin_token, stream)
    assert len(requests) == 2
    assert report["trajectory_valid"] is True, report["trajectory_errors"]

    users = [s for s in steps(report) if s["source"] == "user"]
    assert len(users) == 1, users
    assert users[0]["message"] == QUESTION

    calls = tool_calls(report)
    assert len(calls) == 1, calls
    _, call = calls[0]
    assert call["function_name"] == "get_weather"
    assert call["arguments"] == TOOL_ARGS
    [result] = observation_of(report, call["tool_call_id"])
    assert result["content"] == TOOL_RESULT

    assert report["answer"] == ANSWER
    prompt = TOOL_CALL_USAGE["prompt_tokens"] + ANSWER_USAGE["prompt_tokens"]
    completion = TOOL_CALL_USAGE["completion_tokens"] + ANSWER_USAGE["completion_tokens"]
    assert (prompt, completion) == (130, 22)
    assert token_sums(report) == (prompt, completion)


@pytest.mark.parametrize("stream", [False, True], ids=["nostream", "stream"])
def test_openai_agents_nothing_unread(server, admin_token, stream):
    report, _ = _run(server, admin_token, stream)
    assert report["unread"] == []
