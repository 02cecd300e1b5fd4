"""Python evaluators: run in the SDK's process on the cases that select them under
``evaluators.custom``, their scores stored beside the server's as ``python:<name>``."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from evalkit.sdk import EvalCase, EvalRun, RunResult, ScoreItem, evaluator, run_experiment
from tests.integration import sdk_helpers
from tests.integration.test_sdk_experiment import ANSWERS, trajectory_for

engine = sdk_helpers.engine
dev = sdk_helpers.dev

CUSTOM = "checks:\n  expected_digits: 1\nvibes: {}\nunregistered: {}"


@evaluator(name="checks")
def checks(case: EvalCase, run: EvalRun) -> list[ScoreItem]:
    assert isinstance(case, EvalCase) and isinstance(run, EvalRun)
    digits = len(run.answer or "")
    return [
        ScoreItem(
            name="short_answer",
            score=1.0 if digits <= case.config["expected_digits"] else 0.0,
            explanation=f"{digits} characters",
        ),
        ScoreItem(name="answer_length", score=None, kind="gauge", raw=digits),
        ScoreItem(
            name="matches_expected",
            score=float(run.answer == case.expected["answer"]),
        ),
    ]


@evaluator(name="vibes", kind="gauge")
async def vibes(case, run) -> float:
    await asyncio.sleep(0)
    return 0.5


@evaluator(name="never_selected")
def never_selected(case, run) -> float:
    raise AssertionError("no case lists it")


def test_python_evaluators_score_the_cases_that_select_them(dev):
    dev.suite(custom=CUSTOM)
    dev.agent()
    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: ANSWERS[input["question"]],
        evaluators=[checks, vibes, never_selected],
        progress=False,
    )
    assert result.by_state == {"done": 3}
    by_case = {r["case_id"]: dev.scores(r["id"]) for r in result.runs}
    add, mul = by_case["add"], by_case["mul"]
    assert add["short_answer"]["value"] == 1.0 and mul["short_answer"]["value"] == 0.0
    assert add["short_answer"]["evaluator"] == "python:checks"
    assert mul["short_answer"]["explanation"] == "2 characters"
    assert mul["answer_length"]["kind"] == "gauge" and mul["answer_length"]["raw"] == 2
    assert add["matches_expected"]["value"] == 1.0
    assert add["vibes"] == {**add["vibes"], "value": 0.5, "kind": "gauge"}
    assert add["vibes"]["evaluator"] == "python:vibes"
    # The server's own evaluators score the same run; a custom name with no Python or
    # remote evaluator behind it is skipped by the server, as before.
    assert add["exact_match"]["value"] == 1.0
    assert add["unregistered"]["evaluator"] == "remote:unregistered"
    assert "Python evaluator" in add["unregistered"]["skipped"]
    names = {s["name"] for s in result.scores}
    assert {"short_answer", "matches_expected", "exact_match"} <= names


def test_evaluator_errors_and_bad_scores_are_recorded(dev):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")}, custom="broken: {}\nout_of_range: {}")

    @evaluator(name="broken")
    def broken(case, run):
        raise RuntimeError("grader crashed")

    @evaluator
    def out_of_range(case, run):
        return 7

    dev.agent()
    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: "5",
        evaluators=[broken, out_of_range],
        progress=False,
    )
    scores = dev.scores(result.runs[0]["id"])
    assert scores["broken"]["value"] is None
    assert scores["broken"]["error"] == "RuntimeError: grader crashed"
    assert "outside [0, 1]" in scores["out_of_range"]["error"]
    assert result.by_state == {"done": 1}


def test_requires_trajectory(dev):
    dev.suite(
        cases={"add": ("What is 2 + 3?", "5"), "mul": ("What is 6 * 7?", "42")}, custom="steps: {}"
    )

    @evaluator(name="steps", requires_trajectory=True)
    def steps(case, run):
        return ScoreItem(name="steps", score=1.0, raw=len(run.trajectory["steps"]))

    def task(input):
        if input["question"].startswith("What is 2"):
            return RunResult(answer="5", trajectory=trajectory_for(input["question"], "5"))
        return "42"

    dev.agent()
    result = run_experiment(
        dataset="finance", agent="mine", task=task, evaluators=[steps], progress=False
    )
    by_case = {r["case_id"]: dev.scores(r["id"])["steps"] for r in result.runs}
    assert by_case["add"]["value"] == 1.0 and by_case["add"]["raw"] == 2
    assert by_case["mul"]["value"] is None and "no valid trajectory" in by_case["mul"]["skipped"]


def test_the_scores_route_is_the_creators_and_sdk_only(dev):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")})
    dev.agent()
    result = run_experiment(dataset="finance", agent="mine", task=lambda q: "5", progress=False)
    run_id = result.runs[0]["id"]
    body = {"scores": [{"evaluator": "x", "name": "x", "value": 1.0}]}
    url = f"{dev.server.url}/api/runs/{run_id}/scores"
    r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {dev.admin}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "personal-agent-owner-only"
    twice = {"scores": [body["scores"][0], body["scores"][0]]}
    r = dev.api("POST", f"/api/runs/{run_id}/scores", json=twice)
    assert r.status_code == 400 and r.json()["error"]["code"] == "duplicate-score"
    r = dev.api("POST", f"/api/runs/{run_id}/scores", json={**body, "round": 9})
    assert r.status_code == 400 and r.json()["error"]["code"] == "no-such-round"
    r = dev.api("POST", f"/api/runs/{run_id}/scores", json=body)
    assert r.status_code == 200 and r.json() == {
        "run_id": run_id,
        "round": 1,
        "stored": ["x"],
        "kept": [],
    }
    # A name the run already has from another evaluator is kept as it was.
    taken = {"scores": [{"evaluator": "y", "name": "exact_match", "value": 0.0}]}
    r = dev.api("POST", f"/api/runs/{run_id}/scores", json=taken)
    assert r.json()["kept"] == ["exact_match"] and dev.scores(run_id)["exact_match"]["value"] == 1
    # A CLI-driven experiment takes no Python scores.
    dev.api(
        "POST",
        "/api/workspaces/alice/agents",
        json={"name": "hosted", "harness_url": "http://127.0.0.1:9"},
    )
    r = dev.api(
        "POST",
        "/api/experiments",
        json={"dataset": "finance", "agent": "hosted", "capabilities": {}},
    )
    cli_run = r.json()["id"]
    runs = dev.api("GET", f"/api/experiments/{cli_run}").json()["run_list"]
    r = dev.api("POST", f"/api/runs/{runs[0]['id']}/scores", json=body)
    assert r.status_code == 409 and r.json()["error"]["code"] == "not-sdk-driven"


def test_cases_route_gives_the_pinned_versions(dev):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")}, custom="checks: {expected_digits: 1}")
    dev.agent()
    result = run_experiment(dataset="finance", agent="mine", task=lambda q: "5", progress=False)
    r = dev.api("GET", f"/api/experiments/{result.id}/cases")
    [case] = r.json()["cases"]
    assert case["case_id"] == "add" and case["version"] == 1
    assert case["content"]["input"] == {"question": "What is 2 + 3?"}
    assert case["content"]["evaluators"]["custom"] == {"checks": {"expected_digits": 1}}


@pytest.mark.parametrize("bad", [lambda c, r: 1.0, "not a function"])
def test_evaluators_must_be_decorated(dev, bad):
    from evalkit.sdk import SdkError

    with pytest.raises(SdkError, match="@evaluator"):
        run_experiment(dataset="finance", agent="mine", task=lambda q: "5", evaluators=[bad])


def test_the_sdk_routes_are_the_creators(dev):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")})
    dev.agent()
    result = run_experiment(dataset="finance", agent="mine", task=lambda q: "5", progress=False)
    run_id = result.runs[0]["id"]
    admin = {"Authorization": f"Bearer {dev.admin}"}
    for path, body in [
        (f"/api/experiments/{result.id}/sdk-steps", {"steps": []}),
        (f"/api/experiments/{result.id}/sdk-rounds", {"evaluators": ["x"]}),
        (f"/api/runs/{run_id}/trajectory/refetch", {}),
    ]:
        r = httpx.post(dev.server.url + path, json=body, headers=admin)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"]["code"] == "personal-agent-owner-only"
    # The creator: a run that kept its own trajectory has no session to read again.
    r = dev.api("POST", f"/api/runs/{run_id}/trajectory/refetch")
    assert r.status_code == 409 and r.json()["error"]["code"] == "no-session"
    step = {"run_id": 999, "from_state": "queued", "to_state": "starting"}
    r = dev.api("POST", f"/api/experiments/{result.id}/sdk-steps", json={"steps": [step]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "no-such-run"
    step = {"run_id": run_id, "from_state": "queued", "to_state": "done"}
    r = dev.api("POST", f"/api/experiments/{result.id}/sdk-steps", json={"steps": [step]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "transition-not-allowed"
    # A replayed step is not applied twice.
    step = {"run_id": run_id, "from_state": "queued", "to_state": "starting"}
    r = dev.api("POST", f"/api/experiments/{result.id}/sdk-steps", json={"steps": [step]})
    assert r.json()["applied"] == [False] and r.json()["states"] == {str(run_id): "done"}
