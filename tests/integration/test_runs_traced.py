"""Harness API for invocation, traces for trajectories (path 3c): the server starts and
polls the run through the harness, the agent's spans reach the collector through the real
OpenTelemetry exporter, and the settle job builds the run's trajectory from them."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.harness.reference import Behaviour
from evalkit.otel.mapping import load_starter
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.otel_helpers import agent_session, exporter, mint, recorder
from tests.integration.runs_helpers import (
    api,
    engine_server,
    harness,
    login_token,
    until,
    wait_finished,
)


@pytest.fixture
def engine(database_url, tmp_path):
    def quick_settle(settings) -> None:
        settings.otel.settle_seconds = 0.3

    running = engine_server(database_url, tmp_path, extra=quick_settle)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def dev(engine, cli, tmp_path):
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    repo = Repo(tmp_path / "repo")
    repo.case(
        "finance",
        "add",
        "input:\n  question: 'What is 2 + 3?'\nexpected:\n  answer: '5'\n"
        "evaluators:\n  exact_match: true\n  tool_calls:\n    required: [calculator]\n"
        "  steps: true\n",
    )
    assert cli("sync", str(repo.suite("finance")), "--workspace", "dev").code == 0
    return token


def traced_agent(engine, token: str, url: str, **settings) -> str:
    body = {
        "name": "traced",
        "harness_url": url,
        "trajectory_source": "otel",
        "mapping": load_starter("openinference"),
        "poll_interval": 0.05,
        **settings,
    }
    admin_api(engine, token, "POST", "/api/workspaces/dev/agents", json=body)
    return mint(engine, token, "dev", "traced")


def test_trajectory_comes_from_the_spans(engine, dev, cli):
    with harness(Behaviour(run_seconds=1.0, without=frozenset({"trajectory"}))) as ref:
        agent_token = traced_agent(engine, dev, ref.url, trajectory_wait=20)
        started = cli("run", "finance@dev", "--agent", "traced@dev", "--no-wait", "--json")
        assert started.code == 0, started.err
        experiment = started.json
        listed = api(engine, dev, "GET", f"/api/experiments/{experiment['id']}").json()
        run_id = str(listed["run_list"][0]["id"])
        until(lambda: ref.run_for(run_id) is not None, what="the harness run")
        session_id = ref.run_for(run_id).id
        # The agent traces its work with the harness run id as the session id.
        with recorder() as (tracer, memory):
            agent_session(tracer, session_id)
            spans = memory.get_finished_spans()
        assert exporter(engine, agent_token).export(spans) == SpanExportResult.SUCCESS
        detail = wait_finished(engine, dev, experiment["id"])
        assert detail["by_state"] == {"done": 1}
        run = api(engine, dev, "GET", f"/api/runs/{run_id}?trajectory=1").json()
        assert run["session_id"] == session_id
        listed = cli("traces", "list", "--agent", "traced@dev", "--json").json
        assert [(t["session_id"], t["run_id"]) for t in listed] == [(session_id, int(run_id))]
        assert run["trajectory_source"] == "otel" and run["trajectory_valid"] is True
        assert run["trajectory_partial"] is False
        steps = run["trajectory"]["steps"]
        assert steps[0]["source"] == "user" and steps[0]["message"] == "What is 2 + 3?"
        assert any(step.get("tool_calls") for step in steps)
        # Scored on the trajectory built from the spans, not on anything the harness sent.
        scores = {
            s["name"]: s for s in api(engine, dev, "GET", f"/api/runs/{run_id}/scores").json()
        }
        assert scores["exact_match"]["value"] == 1.0, scores["exact_match"]
        assert scores["tool_calls"]["value"] == 1.0, scores["tool_calls"]
        agent_steps = sum(1 for step in steps if step["source"] == "agent")
        assert scores["steps"]["raw"] == agent_steps, scores["steps"]


def test_no_spans_within_the_trajectory_wait(engine, dev, cli):
    with harness(Behaviour(without=frozenset({"trajectory"}))) as ref:
        traced_agent(engine, dev, ref.url, trajectory_wait=0.5)
        result = cli("run", "finance@dev", "--agent", "traced@dev", "--json")
        assert result.code == 0, result.err
        run = api(engine, dev, "GET", f"/api/runs/{result.json['run_list'][0]['id']}").json()
        assert run["state"] == "done" and run["trajectory_valid"] is False
        [error] = run["trajectory_errors"]
        assert error["rule"] == "not-collected" and "trajectory wait" in error["message"]
