"""In-place scoring: an SDK run whose evaluators call nothing outside evalkit is scored and
ended by the batch that brings it to scoring, and stores what the worker's scoring would."""

from __future__ import annotations

import time

import httpx

from evalkit.sdk import evaluator, run_experiment
from tests.integration import sdk_helpers

engine = sdk_helpers.engine
dev = sdk_helpers.dev

ANSWERS = {"What is 2 + 3?": "5", "What is 6 * 7?": "41"}
SCORE_FIELDS = (
    "name",
    "value",
    "kind",
    "explanation",
    "error",
    "skipped",
    "evaluator",
    "evaluator_version",
    "judge_model",
    "prompt_hash",
    "raw",
)


def case(question: str, answer: str, extra: str = "") -> str:
    return (
        f"input:\n  question: {question!r}\nexpected:\n  answer: {answer!r}\n"
        "evaluators:\n  exact_match: true\n  latency: true\n  contains: {values: ['4']}\n"
        f"  custom:\n    parity: {{}}\n    nobody: {{}}\n{extra}"
    )


@evaluator(name="parity")
def parity(case, run) -> float:
    return float(int(run.answer) % 2 == 0)


def task(input: dict) -> str:
    if input["question"].startswith("What is 10"):
        raise RuntimeError("the task broke")
    return ANSWERS[input["question"]]


def test_in_place_scores_are_the_workers_and_the_run_ends_in_the_batch(dev):
    dev.repo.case("mixed", "add", case("What is 2 + 3?", "5"))
    dev.repo.case("mixed", "mul", case("What is 6 * 7?", "42"))
    dev.repo.case("mixed", "sub", case("What is 10 - 4?", "6"))
    # A rubric with no judge here is the server's to grade: that run goes to the worker.
    judged = "  judge:\n    rubric: Is the answer right?\n"
    dev.repo.case("mixed", "judged", case("What is 2 + 3?", "5", judged))
    dev.agent()
    result = run_experiment(
        dataset="mixed", agent="mine", task=task, evaluators=[parity], progress=False
    )
    assert result.by_state == {"done": 3, "failed": 1}
    runs = {r["case_id"]: r["id"] for r in result.runs}

    events = {name: dev.run(run_id)["events"] for name, run_id in runs.items()}
    steps = [(e["from_state"], e["to_state"], e["attempts"], e["why"]) for e in events["add"]]
    worker_steps = [
        (e["from_state"], e["to_state"], e["attempts"], e["why"]) for e in events["judged"]
    ]
    assert steps == worker_steps  # the same steps, whoever scored
    assert [e["actor"] for e in events["add"]][-1] == "server"
    assert [e["actor"] for e in events["judged"]][-1] == "worker"
    assert events["sub"][-1]["to_state"] == "failed"
    assert events["sub"][-1]["actor"] == "server"
    in_place = [runs["add"], runs["mul"], runs["sub"]]

    # The worker scores the same runs again in a new round: the same rows come out.
    first = {run_id: _round(dev, run_id, 1) for run_id in in_place}
    assert first[runs["add"]]["parity"]["evaluator"] == "python:parity"
    assert first[runs["add"]]["nobody"]["evaluator"] == "remote:nobody"
    assert first[runs["sub"]]["exact_match"]["skipped"]
    assert first[runs["mul"]]["exact_match"]["value"] == 0.0
    opened = dev.api(
        "POST",
        f"/api/experiments/{result.id}/sdk-rounds",
        json={"evaluators": [], "rescore_runs": in_place},
    )
    assert opened.status_code == 201, opened.text
    again = {run_id: _round(dev, run_id, 2, wait_for=len(first[run_id])) for run_id in in_place}
    assert again == first


def test_a_refused_batch_leaves_its_runs_where_they_were(dev):
    """A batch is one transaction: a Python score the database refuses, after the batch's
    steps were recorded, undoes them all (nothing half done, nothing scored), and the same
    batch sent again lands: the run is scored in place and ended."""
    content = {
        "input": {"question": "What is 2 + 3?"},
        "expected": {"answer": "5"},
        "evaluators": {"exact_match": True, "custom": {"parity": {}}},
    }
    synced = dev.api(
        "POST",
        "/api/workspaces/alice/datasets/one/sync",
        json={"cases": [{"id": "add", "content": content}]},
    )
    assert synced.status_code == 200, synced.text
    dev.agent()
    created = dev.api(
        "POST",
        "/api/experiments",
        json={"dataset": "one@alice", "agent": "mine@alice", "sdk": True},
    )
    assert created.status_code == 201, created.text
    experiment = created.json()["id"]
    [run] = dev.api("GET", f"/api/experiments/{experiment}/work").json()["runs"]
    steps_url = f"/api/experiments/{experiment}/sdk-steps"
    claim = _step(run["run_id"], "queued", "starting")
    assert dev.api("POST", steps_url, json={"steps": [claim]}).json()["applied"] == [True]

    def report(explanation: str) -> httpx.Response:
        collecting = _step(
            run["run_id"],
            "starting",
            "collecting",
            harness_status="succeeded",
            answer="5",
            started_at="2026-01-01T00:00:00Z",
            harness_done_at="2026-01-01T00:00:01Z",
        )
        scoring = _step(
            run["run_id"],
            "collecting",
            "scoring",
            trajectory={"source": "sdk", "fetch_error": "none here"},
        )
        score = {"evaluator": "parity", "name": "parity", "value": 0.0}
        body = {
            "steps": [collecting, scoring],
            "scores": [
                {"run_id": run["run_id"], "scores": [{**score, "explanation": explanation}]}
            ],
        }
        return dev.api("POST", steps_url, json=body)

    refused = report("a NUL \u0000 here")
    assert refused.status_code == 400, refused.text
    after = dev.run(run["run_id"])
    assert after["state"] == "starting"
    assert [e["to_state"] for e in after["events"]] == ["starting"]
    assert dev.scores(run["run_id"]) == {}

    landed = report("odd")
    assert landed.status_code == 200, landed.text
    assert landed.json()["applied"] == [True, True]
    after = dev.run(run["run_id"])
    assert after["state"] == "done"
    assert [e["to_state"] for e in after["events"]] == ["starting", "collecting", "scoring", "done"]
    scores = dev.scores(run["run_id"])
    assert scores["parity"]["explanation"] == "odd"
    assert scores["exact_match"]["value"] == 1.0
    assert dev.api("GET", f"/api/experiments/{experiment}").json()["status"] == "finished"


def _step(run_id: int, from_state: str, to_state: str, **fields: object) -> dict:
    return {
        "run_id": run_id,
        "from_state": from_state,
        "from_attempts": 0,
        "to_state": to_state,
        "attempts": 0,
        **fields,
    }


def _round(dev, run_id: int, round_: int, wait_for: int = 0) -> dict[str, dict]:
    deadline = time.monotonic() + 30
    while True:
        found = dev.api("GET", f"/api/runs/{run_id}/scores").json()
        rows = {s["name"]: {k: s[k] for k in SCORE_FIELDS} for s in found if s["round"] == round_}
        if len(rows) >= wait_for or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)
