"""Scoring through a real server: experiments run with the reference harness on loopback,
the worker scores each run at the end of its life (round 1), `evalkit evaluate` re-scores in
new rounds, and `score_run` is replayed against the same database."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evalkit.db import Database
from evalkit.harness.reference import Behaviour
from evalkit.scoring.run import CONCURRENCY, score_run
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, add_user, admin_api
from tests.integration.judge_helpers import LoopbackServer
from tests.integration.runs_helpers import (
    UNGUARDED,
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
)

EVERY_BUILTIN = """\
input:
  question: {question!r}
expected:
  answer: {answer!r}
evaluators:
  exact_match: true
  numeric: {{tolerance: 0.5}}
  contains: [{contains!r}]
  not_contains: {{values: [sorry], ignore_case: true}}
  regex: '^-?\\d+$'
  json_schema:
    type: object
    required: [result]
    properties: {{result: {{type: integer}}}}
  tool_calls: {{required: [calculator], forbidden: [delete_file], order: [calculator]}}
  max_steps: 5
  latency: true
  tokens: true
  cost: true
  steps: true
  tool_call_count: true
"""
CHECKS = (
    "exact_match",
    "numeric",
    "contains",
    "not_contains",
    "regex",
    "json_schema",
    "tool_calls",
    "max_steps",
)
GAUGES = ("latency", "tokens", "cost", "steps", "tool_call_count")
FROM_TRAJECTORY = ("tool_calls", "max_steps", "tokens", "cost", "steps", "tool_call_count")


@pytest.fixture
def engine(database_url, tmp_path):
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def dev(engine, cli, tmp_path):
    """@dev with the `finance` suite (every built-in) and `variants` (an overlay, a judge,
    a custom evaluator and a broken schema) synced; the CLI logged in as admin."""
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    repo = Repo(tmp_path / "repo")
    repo.case(
        "finance", "add", EVERY_BUILTIN.format(question="What is 2 + 3?", answer="5", contains="5")
    )
    # A wrong reference: the agent says 42, so the answer checks fail and the rest pass.
    repo.case(
        "finance", "mul", EVERY_BUILTIN.format(question="What is 6 * 7?", answer="40", contains="4")
    )
    repo.case(
        "variants",
        "add-strict",
        "overlay: add\nexpected:\n  answer: '6'\nevaluators:\n  not_contains: null\n",
    )
    repo.case(
        "variants",
        "graded",
        "input:\n  question: What is 1 + 1?\nexpected:\n  answer: '2'\nevaluators:\n"
        "  exact_match: true\n  judge: {rubric: The answer is 2.}\n"
        "  custom: {tone: {strict: true}}\n"
        "  json_schema: {type: object, minProperties: -1}\n",
    )
    for suite in ("finance", "variants"):
        synced = cli("sync", str(repo.suite(suite)), "--workspace", "dev")
        assert synced.code == 0, synced.err
    return token


def run_experiment(cli, dataset: str, agent: str = "ref@dev") -> dict:
    result = cli("run", f"{dataset}@dev", "--agent", agent, "--json")
    assert result.code == 0, result.err
    return result.json


def scores_of(engine, token: str, run_id: int, round_: int | None = None) -> dict[str, dict]:
    query = f"?round={round_}" if round_ is not None else ""
    r = api(engine, token, "GET", f"/api/runs/{run_id}/scores{query}")
    assert r.status_code == 200, r.text
    found = r.json()
    if round_ is None:
        round_ = max(s["round"] for s in found)
    return {s["name"]: s for s in found if s["round"] == round_}


def runs_by_case(detail: dict) -> dict[str, int]:
    return {r["case_id"]: r["id"] for r in detail["run_list"]}


def test_every_built_in_scores_a_harness_run(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        detail = run_experiment(cli, "finance")
        assert detail["by_state"] == {"done": 2}
        runs = runs_by_case(detail)

        add = scores_of(engine, dev, runs["add"])
        assert set(add) == set(CHECKS) | set(GAUGES)
        for name in CHECKS:
            assert add[name]["value"] == 1.0, add[name]
            assert add[name]["kind"] == "evaluator" and add[name]["round"] == 1
            assert add[name]["evaluator"] == f"builtin:{name}"
            assert add[name]["evaluator_version"] == "1"
        assert add["exact_match"]["explanation"] == "the answer equals '5'"
        assert add["json_schema"]["explanation"] == "the output validates against the schema"
        for name in GAUGES:
            assert add[name]["kind"] == "gauge" and add[name]["value"] is None, add[name]
            assert add[name]["error"] is None and add[name]["skipped"] is None
        run = api(engine, dev, "GET", f"/api/runs/{runs['add']}?trajectory=1").json()
        final = run["trajectory"]["final_metrics"]
        assert (
            add["tokens"]["raw"] == final["total_prompt_tokens"] + final["total_completion_tokens"]
        )
        assert add["cost"]["raw"] == pytest.approx(final["total_cost_usd"])
        assert add["steps"]["raw"] == 2 and add["tool_call_count"]["raw"] == 1
        assert 0 <= add["latency"]["raw"] < 30

        mul = scores_of(engine, dev, runs["mul"])
        assert mul["exact_match"]["value"] == 0.0
        assert mul["exact_match"]["explanation"] == "the answer '42' is not '40'"
        assert mul["numeric"]["value"] == 0.0
        assert mul["numeric"]["explanation"] == (
            "read 42 from the answer; expected 40 within 0.5, off by 2"
        )
        assert mul["contains"]["value"] == 1.0 and mul["tool_calls"]["value"] == 1.0

        shown = cli("runs", "show", str(runs["mul"]))
        assert shown.code == 0, shown.err
        assert "scores, round 1 (latest):" in shown.out
        assert "the answer '42' is not '40'" in shown.out
        listed = cli("runs", "scores", str(runs["mul"]), "--json")
        assert listed.code == 0 and {s["name"] for s in listed.json} == set(mul)


def test_overlay_judge_custom_and_broken_config(engine, dev, cli):
    """An overlay is scored with its effective content; the judge (no default judge set), a
    custom evaluator the workspace lacks and a broken schema give readings of their own and
    never keep the run from ending."""
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        detail = run_experiment(cli, "variants")
        assert detail["by_state"] == {"done": 2}
        runs = runs_by_case(detail)

        strict = scores_of(engine, dev, runs["add-strict"])
        assert "not_contains" not in strict  # the overlay turned it off
        assert strict["exact_match"]["value"] == 0.0  # its own expected answer, 6
        assert strict["contains"]["value"] == 1.0  # the target's evaluators still apply

        graded = scores_of(engine, dev, runs["graded"])
        assert graded["exact_match"]["value"] == 1.0
        judge = graded["judge"]
        assert judge["value"] is None and judge["error"], judge
        assert judge["evaluator"] == "judge"
        tone = graded["tone"]
        assert tone["value"] is None and (tone["skipped"] or tone["error"]), tone
        assert tone["evaluator"] == "remote:tone"
        schema = graded["json_schema"]
        assert schema["value"] is None and "not a valid JSON Schema" in schema["error"]


@pytest.mark.parametrize(
    ("behaviour", "agent_provides", "skipped"),
    [
        (
            Behaviour(without=frozenset({"tool_calls", "token_usage"})),
            {},
            {
                "tool_calls": "provides.tool_calls is false",
                "tool_call_count": "provides.tool_calls is false",
                "tokens": "provides.token_usage is false",
                "cost": "provides.token_usage is false",
            },
        ),
        (
            Behaviour(without=frozenset({"trajectory"})),
            {},
            {name: "provides no trajectory" for name in FROM_TRAJECTORY},
        ),
        (
            Behaviour(invalid_trajectory=True),
            {},
            {name: "not valid ATIF" for name in FROM_TRAJECTORY},
        ),
        # The agent's own provides overrides what the harness declares.
        (Behaviour(), {"tool_calls": False}, {"tool_calls": "provides.tool_calls is false"}),
    ],
    ids=["no-tool-calls-no-tokens", "no-trajectory", "invalid-trajectory", "agent-override"],
)
def test_gating_skips_as_neutral(engine, dev, cli, behaviour, agent_provides, skipped):
    with harness(behaviour) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, provides=agent_provides)
        detail = run_experiment(cli, "finance")
        assert detail["by_state"] == {"done": 2}
        found = scores_of(engine, dev, runs_by_case(detail)["add"])
    for name, reason in skipped.items():
        item = found[name]
        assert item["value"] is None and item["error"] is None, item
        assert reason in item["skipped"], item
    for name in set(CHECKS) - set(skipped):
        assert found[name]["value"] == 1.0, found[name]
    assert found["latency"]["raw"] is not None  # timed by the run when there is no trajectory


async def test_score_run_replayed_stores_nothing_twice(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        detail = run_experiment(cli, "finance")
    run_id = runs_by_case(detail)["add"]
    before = stored_rows(engine.db_url, run_id)
    assert len(before) == len(CHECKS) + len(GAUGES)
    db = Database(engine.db_url)
    await db.open()
    try:
        async with httpx.AsyncClient() as http:
            again = await score_run(db, run_id, settings=engine.settings, http=http)
            explicit = await score_run(db, run_id, round=1, settings=engine.settings, http=http)
    finally:
        await db.close()
    assert stored_rows(engine.db_url, run_id) == before
    assert {i.name: i.value for i in again} == {row[1]: row[2] for row in before}
    assert again == explicit


async def test_an_evaluator_past_its_time_is_an_error_score(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        detail = run_experiment(cli, "finance")
    run_id = runs_by_case(detail)["add"]
    db = Database(engine.db_url)
    await db.open()
    try:
        async with httpx.AsyncClient() as http:
            items = await score_run(
                db, run_id, round=9, settings=engine.settings, http=http, timeout=0
            )
    finally:
        await db.close()
    assert {i.name for i in items} == set(CHECKS) | set(GAUGES)
    for item in items:
        assert item.value is None and item.error == f"{item.name} did not finish within 0 s"
    ninth = [row for row in stored_rows(engine.db_url, run_id) if row[0] == 9]
    assert sorted(row[1] for row in ninth) == sorted(i.name for i in items)
    assert all(row[2] is None for row in ninth)


def stored_rows(db_url: str, run_id: int) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT round, name, value, created_at FROM scores WHERE run_id = %s ORDER BY 1, 2",
            (run_id,),
        ).fetchall()


def test_evaluate_opens_new_rounds(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        detail = run_experiment(cli, "finance")
    experiment = detail["id"]
    runs = runs_by_case(detail)
    first = scores_of(engine, dev, runs["mul"], 1)

    # The harness is gone: re-scoring never calls the agent.
    result = cli("evaluate", str(experiment), "--json")
    assert result.code == 0, result.err
    second = result.json
    assert second["round"] == 2 and second["runs"] == 2 and second["pending_jobs"] == 0
    assert second["runs_scored"] == 2 and second["evaluators"] is None
    assert second["scores"] == 2 * (len(CHECKS) + len(GAUGES)) and second["errors"] == 0
    totals = {t["name"]: t for t in second["totals"]}
    assert totals["exact_match"]["mean"] == 0.5 and totals["exact_match"]["runs"] == 2
    assert totals["steps"]["kind"] == "gauge" and totals["steps"]["raw_mean"] == 2.0
    again = scores_of(engine, dev, runs["mul"], 2)
    assert {n: s["value"] for n, s in again.items()} == {n: s["value"] for n, s in first.items()}

    # Only exact_match again: the other scores are carried over from round 2, unchanged.
    result = cli("evaluate", str(experiment), "--evaluator", "exact_match")
    assert result.code == 0, result.err
    assert "round 3" in result.out and "only exact_match" in result.out
    third = scores_of(engine, dev, runs["mul"], 3)
    assert set(third) == set(again)
    assert third["latency"]["created_at"] == again["latency"]["created_at"]
    assert third["exact_match"]["created_at"] > again["exact_match"]["created_at"]

    rounds = cli("experiments", "rounds", str(experiment), "--json")
    assert rounds.code == 0, rounds.err
    assert [r["round"] for r in rounds.json] == [3, 2, 1]
    assert rounds.json[0]["evaluators"] == ["exact_match"]
    assert rounds.json[0]["created_by"] == "admin"
    assert rounds.json[2]["created_at"] is not None  # round 1: made with the experiment
    assert rounds.json[2]["created_by"] == "admin"

    shown = cli("runs", "show", str(runs["mul"]))
    assert (
        shown.out.index("round 3 (latest)")
        < shown.out.index("round 2")
        < shown.out.index("round 1")
    )
    one = api(engine, dev, "GET", f"/api/runs/{runs['mul']}/scores").json()
    assert [s["round"] for s in one] == sorted((s["round"] for s in one), reverse=True)


def test_evaluate_refusals(engine, dev, cli):
    with harness(Behaviour(run_seconds=60)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, run_timeout=120)
        started = cli("run", "finance@dev", "--agent", "ref@dev", "--no-wait", "--json")
        assert started.code == 0, started.err
        experiment = started.json["id"]
        running = cli("evaluate", str(experiment))
        assert running.code == 1 and "[experiment-running]" in running.err, running.err
        assert "still running" in running.err
    unknown = cli("evaluate", str(experiment), "--evaluator", "exact_mach")
    assert unknown.code == 1 and "unknown evaluator 'exact_mach'" in unknown.err
    assert cli("evaluate", "999999").code == 1

    # Run from Python: refused when the script holds part of the scoring (a Python
    # evaluator scored it, or run_experiment's own judge grades its rubrics).
    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE experiments SET driver = 'sdk', status = 'finished' WHERE id = %s",
            (experiment,),
        )
        conn.execute(
            "INSERT INTO scores (run_id, name, value, evaluator) SELECT min(id), 'tone', 1, "
            "'python:tone' FROM runs WHERE experiment_id = %s",
            (experiment,),
        )
    python = cli("evaluate", str(experiment))
    assert python.code == 1 and "[python-evaluators]" in python.err
    assert "Python evaluators (tone)" in python.err and "evaluate_experiment" in python.err
    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM scores WHERE evaluator = 'python:tone'")
        conn.execute(
            "UPDATE experiments SET judge_by = 'sdk', judge = 'sdk:m' WHERE id = %s",
            (experiment,),
        )
    judged = cli("evaluate", str(experiment))
    assert judged.code == 1 and "[sdk-judge]" in judged.err
    assert "evaluate_experiment" in judged.err

    with psycopg.connect(engine.db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE experiments SET driver = 'server', judge_by = NULL, judge = NULL WHERE id = %s",
            (experiment,),
        )
        conn.execute(UNGUARDED)
        conn.execute("UPDATE runs SET state = 'errored' WHERE experiment_id = %s", (experiment,))
    nothing = cli("evaluate", str(experiment))
    assert nothing.code == 1 and "[nothing-to-score]" in nothing.err

    bob = add_user(engine, dev, "bob")  # not a writer of @dev
    refused = cli("evaluate", str(experiment), token=bob)
    assert refused.code == 1 and "[shared-writers-write]" in refused.err
    r = api(engine, dev, "POST", f"/api/experiments/{experiment}/evaluate", json={"evaluators": []})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-evaluator"
    r = api(engine, dev, "GET", "/api/runs/999999/scores")
    assert r.status_code == 404


class CrowdEvaluators(LoopbackServer):
    """A Custom Evaluator API server where every call takes ``seconds`` and the most calls
    in flight at once is recorded."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.paths: list[str] = []
        self.in_flight = self.most = 0
        super().__init__(Starlette(routes=[Route("/{name}", self._evaluate, methods=["POST"])]))

    async def _evaluate(self, request: Request) -> JSONResponse:
        name = request.path_params["name"]
        self.paths.append(name)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        return JSONResponse({"scores": [{"name": name, "score": 1, "explanation": name}]})


def test_evaluators_of_the_agents_workspace_run_side_by_side_four_at_a_time(
    engine, dev, cli, tmp_path
):
    """Six remote evaluators of one run: called together, never more than CONCURRENCY at
    once; and looked up in the agent's workspace (@agents), not the experiment's (@dev)."""
    names = [f"e{i}" for i in range(1, 7)]
    admin_api(engine, dev, "POST", "/api/workspaces", json={"name": "agents"})
    repo = Repo(tmp_path / "crowd-repo")
    custom = "".join(f"    {name}: {{}}\n" for name in names)
    repo.case(
        "crowd",
        "crowded",
        "input:\n  question: What is 2 + 3?\nexpected:\n  answer: '5'\n"
        f"evaluators:\n  exact_match: true\n  custom:\n{custom}",
    )
    with CrowdEvaluators(seconds=1.0) as evals, harness() as ref:
        for name in names:
            endpoint = f"{evals.url}/{name}"
            made = cli("evaluators", "create", f"{name}@agents", "--endpoint", endpoint)
            assert made.code == 0, made.err
        # The same name in the dataset's workspace, somewhere else: never called.
        made = cli("evaluators", "create", "e1@dev", "--endpoint", evals.url + "/wrong-workspace")
        assert made.code == 0, made.err
        synced = cli("sync", str(repo.suite("crowd")), "--workspace", "dev")
        assert synced.code == 0, synced.err
        create_agent(engine, dev, "agents", "ref", ref.url)
        detail = run_experiment(cli, "crowd", agent="ref@agents")
        assert detail["by_state"] == {"done": 1} and detail["workspace"] == "dev"
        found = scores_of(engine, dev, runs_by_case(detail)["crowded"])
        paths, most = sorted(evals.paths), evals.most
    assert paths == names
    assert most == CONCURRENCY == 4
    for name in names:
        assert found[name]["value"] == 1.0 and found[name]["evaluator"] == f"remote:{name}"
    assert found["exact_match"]["value"] == 1.0


def test_a_failed_run_is_not_judged_and_reads_as_failed(engine, dev, cli):
    """The harness fails every run: its checks are skipped ("the run failed"), not 0; the
    summary counts the runs as failed; compare shows them; gates fail on them."""
    with harness() as ref, harness(Behaviour(fail_runs=True)) as failing:
        create_agent(engine, dev, "dev", "ref", ref.url)
        create_agent(engine, dev, "dev", "failing", failing.url)
        a = run_experiment(cli, "finance")
        crashed = cli("run", "finance@dev", "--agent", "failing@dev", "--json")
        assert crashed.code == 1 and crashed.json["by_state"] == {"failed": 2}
    b = crashed.json
    runs = runs_by_case(b)
    scores = scores_of(engine, dev, runs["add"])
    assert set(scores) == set(CHECKS) | set(GAUGES)
    for name in CHECKS:
        assert scores[name]["value"] is None, scores[name]
        assert scores[name]["skipped"] == (
            "the run failed, so there is no answer to judge "
            f"(`evalkit runs show {runs['add']}` says why it failed)"
        )
    for name in GAUGES:  # measured, or skipped for their own reason: never "run failed"
        assert "the run failed" not in (scores[name]["skipped"] or "")
    shown = cli("runs", "show", str(runs["add"]))
    assert "skipped" in shown.out and "the run failed, so there is no answer" in shown.out

    summary = cli("experiments", "scores", str(b["id"]), "--json").json
    assert (summary["runs"], summary["failed"], summary["errored"]) == (2, 2, 0)
    assert {f["case_id"] for f in summary["failures"]} == {"add", "mul"}
    assert all("fails every run" in f["error"] for f in summary["failures"])
    exact = {s["name"]: s for s in summary["scores"]}["exact_match"]
    assert (exact["readings"], exact["failed"], exact["skipped"]) == (0, 2, 0)
    assert exact["pass_rate"] is None and exact["pass_rate_all"] == 0.0
    text = cli("experiments", "scores", str(b["id"])).out
    assert "2 of 2 runs FAILED (the agent failed: not judged" in text
    assert "fails every run" in text and "2 runs failed" in text

    compared = cli("experiments", "compare", str(a["id"]), str(b["id"]))
    assert compared.code == 0, compared.err  # no gate given
    assert "runs: baseline 2, 0 failed; new 2, 2 failed (100%) (MORE RUNS FAILED" in compared.out
    assert "failed in the new experiment only (2)" in compared.out
    assert "no regressions" in compared.out  # a crash is not a wrong answer
    md = cli("experiments", "compare", str(a["id"]), str(b["id"]), "--format", "markdown")
    assert "### Failed in the new experiment only (2)" in md.out

    def gate(*gates: str, new: int = b["id"], old: int = a["id"]):
        args = [f"--gate={g}" for g in gates]
        return cli("experiments", "compare", str(old), str(new), *args, "--json")

    on_failed = gate("failed<=0")
    assert on_failed.code == 1
    [result] = on_failed.json["gates"]
    assert result["message"] == f"failed runs of experiment {b['id']}: 2 is not <= 0 (over by 2)"
    on_score = gate("exact_match.pass_rate>=0.5")
    assert on_score.code == 1
    assert "2 runs of experiment" in on_score.json["gates"][0]["message"]
    assert gate("failed_rate<=1", "contains.pass_rate_all<=0").code == 0
    regressions = cli("experiments", "compare", str(a["id"]), str(b["id"]), "--gate-no-regressions")
    assert regressions.code == 1 and "failed where experiment" in regressions.out
    # The other way round, the failed runs are the baseline's: B (the honest one) passes.
    assert gate("failed<=0", "exact_match.pass_rate>=0.5", new=a["id"], old=b["id"]).code == 0

    # A new round scores the failed runs the same way.
    again = cli("evaluate", str(b["id"]), "--json")
    assert again.code == 0, again.err
    rescored = scores_of(engine, dev, runs["mul"], 2)
    assert rescored["exact_match"]["skipped"].startswith("the run failed")
