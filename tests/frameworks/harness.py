"""Shared glue of the framework tests: run a real framework's agent, traced, against the real
edge, and read back what the server built for its session.

    from tests.frameworks.fake_model import FakeModel
    from tests.frameworks.harness import run_framework

    def test_x(server, admin_token):            # fixtures of tests/conftest.py
        with FakeModel() as model:
            report = run_framework(
                server, admin_token,
                part="langgraph",                  # tests/frameworks/<part>/ (its venv)
                script="agent.py",                 # run with the part's venv python
                env={"FAKE_MODEL_URL": model.base_url, "FAKE_MODEL_STREAM": "1"},
                mapping=load_starter("openinference"),
            )
        report["trajectory"], report["answer"], report["unread"], ...

``run_framework(server, admin_token, *, part, script, env, mapping, agent=None,
session_id=None, runner=None) -> dict`` creates the agent (named ``agent`` or after the part)
in the admin's workspace with ``mapping``, mints it a token, runs the script with ``env`` plus
EVALKIT_OTLP_ENDPOINT (``server.url + "/api/otel/v1/traces"``), EVALKIT_AGENT_TOKEN and
EVALKIT_SESSION_ID (a fresh id unless given), then polls ``GET /api/workspaces/admin/agents/
<agent>/sessions/<sid>/check`` until the session is there and its span count is steady,
and returns that check report (the TraceCheck of evalkit/model/otel.py as JSON).
``runner(env) -> CompletedProcess`` replaces running ``part/script`` with
:func:`tests.frameworks.venvs.run_agent` (for a node part, say).

Helpers to read an ATIF trajectory are below (:func:`tool_calls`, :func:`observation_of`,
:func:`token_sums`).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from tests.frameworks.venvs import run_agent
from tests.integration.otel_helpers import TRACES, api, make_agent, mint

WORKSPACE = "admin"
"""The admin's personal workspace, where the framework agents are created."""
POLL_SECONDS = 10.0


def run_framework(
    server: Any,
    admin_token: str,
    *,
    part: str,
    script: str,
    env: Mapping[str, str],
    mapping: dict[str, Any],
    agent: str | None = None,
    session_id: str | None = None,
    runner: Callable[[dict[str, str]], subprocess.CompletedProcess[str]] | None = None,
) -> dict[str, Any]:
    """The check report of the session the part's script traced (see the module doc)."""
    name = agent or part.replace("_", "-").lower()
    make_agent(server, admin_token, WORKSPACE, name=name, mapping=mapping)
    token = mint(server, admin_token, WORKSPACE, name)
    sid = session_id or f"{part}-{uuid.uuid4().hex[:12]}"
    full_env = {
        "EVALKIT_OTLP_ENDPOINT": server.url + TRACES,
        "EVALKIT_AGENT_TOKEN": token,
        "EVALKIT_SESSION_ID": sid,
        **env,
    }
    if runner is not None:
        runner(full_env)
    else:
        run_agent(part, script, full_env)
    return check_report(server, admin_token, name, sid)


def check_report(
    server: Any, admin_token: str, agent: str, session_id: str, *, workspace: str = WORKSPACE
) -> dict[str, Any]:
    """``GET .../sessions/<sid>/check``, polled until the session exists and two reads in a
    row saw the same number of spans (the exporter has flushed by the time the agent exits,
    and the collector stores before it answers, so this is rarely more than one read)."""
    path = f"/api/workspaces/{workspace}/agents/{agent}/sessions/{session_id}/check"
    deadline = time.monotonic() + POLL_SECONDS
    last: dict[str, Any] | None = None
    while True:
        r = api(server, admin_token, "GET", path)
        if r.status_code == 200:
            report = r.json()
            if last is not None and _span_count(last) == _span_count(report):
                return report
            last = report
        elif r.status_code != 404:
            raise AssertionError(f"GET {path}: {r.status_code} {r.text}")
        if time.monotonic() > deadline:
            if last is not None:
                return last
            raise AssertionError(
                f"no session {session_id!r} for agent {agent} after {POLL_SECONDS:.0f}s: "
                f"{r.status_code} {r.text}"
            )
        time.sleep(0.1)


def _span_count(report: dict[str, Any]) -> tuple[int, int]:
    return (report.get("spans_read", 0), report.get("spans_excluded", 0))


# --------------------------------------------------------------------------- reading ATIF


def steps(report: dict[str, Any]) -> list[dict[str, Any]]:
    return list(report["trajectory"].get("steps") or [])


def tool_calls(report: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(step, tool call) for every tool call of every step, in order."""
    return [(step, call) for step in steps(report) for call in step.get("tool_calls") or []]


def observation_of(report: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    """The observation results whose ``source_call_id`` is ``call_id``, in any step."""
    return [
        result
        for step in steps(report)
        for result in (step.get("observation") or {}).get("results") or []
        if result.get("source_call_id") == call_id
    ]


def token_sums(report: dict[str, Any]) -> tuple[int, int]:
    """The sum over the steps of ``metrics.prompt_tokens`` and ``metrics.completion_tokens``."""
    prompt = completion = 0
    for step in steps(report):
        metrics = step.get("metrics") or {}
        prompt += metrics.get("prompt_tokens") or 0
        completion += metrics.get("completion_tokens") or 0
    return prompt, completion


# --------------------------------------------------------------------------- the assertions

QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "18°C, cloudy in Paris"


def assert_weather_turn(report: dict[str, Any], requests: list[dict[str, Any]]) -> None:
    """What every framework's one-tool turn must give, with the starter of its convention
    and no hand edits: a valid trajectory; one user step, the question; one structured
    ``get_weather`` call (arguments a dict) answered by the tool's own text; the model's
    final text as the answer; the two calls' tokens (and not the turn's total again);
    nothing unread and no finding."""
    from tests.frameworks.fake_model import ANSWER, ANSWER_USAGE, TOOL_ARGS, TOOL_CALL_USAGE

    assert len(requests) == 2, requests
    assert report["trajectory_valid"] is True, report["trajectory_errors"]
    users = [s for s in steps(report) if s["source"] == "user"]
    assert [u["message"] for u in users] == [QUESTION], users
    calls = tool_calls(report)
    assert len(calls) == 1, calls
    step, call = calls[0]
    assert step["source"] == "agent"
    assert call["function_name"] == "get_weather"
    assert isinstance(call["arguments"], dict) and call["arguments"] == TOOL_ARGS
    [result] = observation_of(report, call["tool_call_id"])
    assert result["content"] == TOOL_RESULT
    assert report["answer"] == ANSWER
    prompt = TOOL_CALL_USAGE["prompt_tokens"] + ANSWER_USAGE["prompt_tokens"]
    completion = TOOL_CALL_USAGE["completion_tokens"] + ANSWER_USAGE["completion_tokens"]
    assert token_sums(report) == (prompt, completion) == (130, 22)
    assert report["unread"] == []
    assert report["findings"] == []
