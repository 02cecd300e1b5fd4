"""evaluate_experiment: a new scoring round from the script, with the Python evaluators it
holds, and trajectories read again from spans that arrived late."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.sdk import RunResult, SdkError, evaluate_experiment, evaluator, run_experiment
from tests import otel_agents
from tests.integration import sdk_helpers
from tests.integration.otel_helpers import exporter, mint, recorder
from tests.integration.test_sdk_experiment import ANSWERS

engine = sdk_helpers.engine
dev = sdk_helpers.dev


def round_scores(dev, run_id: int, round_: int) -> dict[str, dict]:
    r = dev.api("GET", f"/api/runs/{run_id}/scores?round={round_}")
    return {s["name"]: s for s in r.json()}


def test_rescoring_with_a_new_version_of_an_evaluator(dev):
    dev.suite(custom="strict: {}")
    dev.agent()

    @evaluator(name="strict")
    def strict(case, run):
        return 0.0

    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda q: ANSWERS[q["question"]],
        evaluators=[strict],
        progress=False,
    )
    run_id = result.runs[0]["id"]
    assert round_scores(dev, run_id, 1)["strict"]["value"] == 0.0

    @evaluator(name="strict")
    def fixed(case, run):
        return float(run.answer == case.expected["answer"])

    again = evaluate_experiment(experiment_id=result.id, evaluators=[fixed])
    assert {s["name"]: s["mean"] for s in again.scores}["strict"] == 1.0
    second = round_scores(dev, run_id, 2)
    assert second["strict"]["value"] == 1.0 and second["strict"]["evaluator"] == "python:strict"
    assert second["exact_match"]["value"] == 1.0  # carried forward
    assert round_scores(dev, run_id, 1)["strict"]["value"] == 0.0  # round 1 is kept
    rounds = dev.api("GET", f"/api/experiments/{result.id}/rounds").json()
    assert rounds[0]["round"] == 2 and rounds[0]["evaluators"] == ["python:strict"]
    # The server's own re-scoring refuses an SDK experiment and points here.
    r = dev.api("POST", f"/api/experiments/{result.id}/evaluate", json={})
    assert r.status_code == 409 and r.json()["error"]["code"] == "python-evaluators"
    with pytest.raises(SdkError, match="give the Python evaluators"):
        evaluate_experiment(experiment_id=result.id)


def test_the_server_rescores_an_sdk_experiment_it_holds_all_the_scoring_of(dev, cli):
    """No Python evaluator and no judge of the script's: `evalkit evaluate` re-scores it."""
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", dev.server.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", dev.token)
    dev.suite()
    dev.agent()
    result = run_experiment(
        dataset="finance", agent="mine", task=lambda q: ANSWERS[q["question"]], progress=False
    )
    again = cli("evaluate", str(result.id), "--json")
    assert again.code == 0, again.err
    assert again.json["round"] == 2 and again.json["runs_scored"] == 3
    for run in result.runs:
        assert round_scores(dev, run["id"], 2)["exact_match"]["value"] == 1.0
        assert round_scores(dev, run["id"], 1)["exact_match"]["value"] == 1.0


@evaluator(name="tool_use", requires_trajectory=True)
def tool_use(case, run) -> float:
    return float(any(step.get("tool_calls") for step in run.trajectory["steps"]))


def test_refetch_reads_spans_that_arrived_late(dev):
    text = sdk_helpers.case_text(otel_agents.QUESTION, otel_agents.ANSWER, custom="tool_use: {}")
    dev.repo.case("weather", "paris", text)
    dev.agent(trajectory_wait=0.5)

    def task(input):
        # The agent runs elsewhere and its exporter is late: nothing arrives in time.
        return RunResult(answer=otel_agents.ANSWER, session_id="late-session")

    result = run_experiment(
        dataset="weather", agent="mine", task=task, evaluators=[tool_use], progress=False
    )
    run_id = result.runs[0]["id"]
    first = round_scores(dev, run_id, 1)
    assert "no valid trajectory" in first["tool_use"]["skipped"]
    assert dev.run(run_id)["trajectory_valid"] is False

    with recorder() as (tracer, memory):
        otel_agents.openinference_agent(tracer, session="late-session")
        spans = memory.get_finished_spans()
    token = mint(dev.server, dev.token, "alice", "mine")
    assert exporter(dev.server, token).export(spans) == SpanExportResult.SUCCESS

    again = evaluate_experiment(
        experiment_id=result.id, evaluators=[tool_use], refetch_trajectories=True
    )
    run = dev.run(run_id, trajectory=True)
    assert run["trajectory_valid"] is True and run["trajectory_source"] == "otel"
    second = round_scores(dev, run_id, 2)
    assert second["tool_use"]["value"] == 1.0
    assert second["exact_match"]["value"] == 1.0  # the server scored the run again
    assert {s["name"]: s["mean"] for s in again.scores}["tool_use"] == 1.0
