"""A server-driven run whose evaluators call nothing outside evalkit is scored and ended
in the worker's transaction that attaches its trajectory, and stores what the worker's
scoring job stores: the reference harness on loopback, a real worker, the real CLI."""

from __future__ import annotations

import pytest

from evalkit.harness.reference import Behaviour
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.runs_helpers import (
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
    until,
    wait_finished,
)

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
LOCAL = (
    "evaluators:\n  exact_match: true\n  contains: {values: ['4']}\n  latency: true\n"
    "  steps: true\n  custom:\n    nobody: {}\n"
)


@pytest.fixture
def engine(database_url, tmp_path):
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def token(engine, cli, tmp_path):
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    return token


def sync(cli, tmp_path, cases: dict[str, str]) -> None:
    repo = Repo(tmp_path / "repo")
    for case_id, text in cases.items():
        repo.case("mixed", case_id, text)
    synced = cli("sync", str(repo.suite("mixed")), "--workspace", "dev")
    assert synced.code == 0, synced.err


def case(question: str, answer: str, extra: str = "") -> str:
    return f"input:\n  question: {question!r}\nexpected:\n  answer: {answer!r}\n{LOCAL}{extra}"


def events(engine, token, run_id: int) -> list[dict]:
    return api(engine, token, "GET", f"/api/runs/{run_id}").json()["events"]


def scores(engine, token, run_id: int, round_: int) -> dict[str, dict]:
    found = api(engine, token, "GET", f"/api/runs/{run_id}/scores").json()
    return {s["name"]: {k: s[k] for k in SCORE_FIELDS} for s in found if s["round"] == round_}


def test_local_evaluators_end_the_run_with_its_trajectory(engine, token, cli, tmp_path):
    sync(
        cli,
        tmp_path,
        {
            "add": case("What is 2 + 3?", "5"),
            "mul": case("What is 6 * 7?", "41"),
            # a rubric with no judge configured is the scoring job's: not scored in place
            "judged": case("What is 2 + 3?", "5", "  judge:\n    rubric: Is it right?\n"),
        },
    )
    with harness() as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        result = cli("run", "mixed@dev", "--agent", "ref@dev", "--json")
        assert result.code == 0, result.err
    detail = result.json
    assert detail["by_state"] == {"done": 3}
    runs = {r["case_id"]: r["id"] for r in detail["run_list"]}

    def tail(run_id: int) -> list[tuple]:
        found = events(engine, token, run_id)[-3:]
        return [(e["from_state"], e["to_state"], e["actor"], e["at"]) for e in found]

    for name in ("add", "mul"):
        collected, scored, ended = tail(runs[name])
        assert (collected[1], scored[1], ended[1], scored[2]) == (
            "collecting",
            "scoring",
            "done",
            "worker",
        )
        # The step to collecting waits for the trajectory's fetch; then it, the step to
        # scoring with the scores and the step to done are one transaction (one now()).
        assert collected[3] == scored[3] == ended[3], tail(runs[name])
    collected, scored, ended = tail(runs["judged"])
    assert ended[1] == "done" and collected[3] == scored[3] != ended[3]  # the job's own step

    in_place = [runs["add"], runs["mul"]]
    first = {run_id: scores(engine, token, run_id, 1) for run_id in in_place}
    assert first[runs["add"]]["exact_match"]["value"] == 1.0
    assert first[runs["mul"]]["exact_match"]["value"] == 0.0
    assert first[runs["add"]]["nobody"]["skipped"]
    assert first[runs["add"]]["steps"]["raw"] is not None  # a gauge's reading

    # The scoring job scores the same runs again in a new round: the same rows come out.
    again = api(engine, token, "POST", f"/api/experiments/{detail['id']}/evaluate", json={})
    assert again.status_code == 201, again.text
    second: dict[int, dict] = {}

    def rescored() -> bool:
        second.update({run_id: scores(engine, token, run_id, 2) for run_id in in_place})
        return all(len(second[r]) == len(first[r]) for r in in_place)

    until(rescored, what="round 2's scores")
    assert second == first


def test_a_failed_run_is_ended_failed_in_place_with_its_skips(engine, token, cli, tmp_path):
    sync(cli, tmp_path, {"add": case("What is 2 + 3?", "5")})
    with harness(Behaviour(fail_runs=True)) as ref:
        create_agent(engine, token, "dev", "ref", ref.url)
        result = cli("run", "mixed@dev", "--agent", "ref@dev", "--json")
    detail = wait_finished(engine, token, result.json["id"])
    assert detail["by_state"] == {"failed": 1}
    [run] = detail["run_list"]
    *_, scoring, failed = events(engine, token, run["id"])
    assert (scoring["to_state"], failed["to_state"]) == ("scoring", "failed")
    assert scoring["at"] == failed["at"]
    found = scores(engine, token, run["id"], 1)
    assert found["exact_match"]["skipped"] and found["contains"]["skipped"]
    assert found["steps"]["skipped"] is None  # gauges still measure a failed run
