"""run_experiment end to end against a real edge and worker: the SDK calls the task, posts
each step of every run, and the server scores and finishes the experiment."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.cli.sync import sync
from evalkit.runs.local import ServerError
from evalkit.sdk import (
    EvalCase,
    EvalRun,
    RunResult,
    SdkError,
    arun_experiment,
    evaluator,
    run_experiment,
)
from tests.integration import sdk_helpers
from tests.integration.datasets_helpers import admin_api

engine = sdk_helpers.engine
dev = sdk_helpers.dev

ANSWERS = {"What is 2 + 3?": "5", "What is 6 * 7?": "42", "What is 10 - 4?": "6"}


def test_sync_task_over_a_synced_suite(dev):
    dev.suite()
    dev.agent()
    calls = []

    def task(input: dict) -> str:
        calls.append(input)
        return ANSWERS[input["question"]]

    result = run_experiment(dataset="finance", agent="mine", task=task, progress=False)
    assert len(calls) == 3 and all(set(c) == {"question"} for c in calls)
    assert result.status == "finished" and result.by_state == {"done": 3}
    assert result.url.endswith(f"/experiments/{result.id}")
    assert result.summary is not None and result.summary == result.experiment["summary"]
    assert result.experiment["driver"] == "sdk" and result.experiment["workspace"] == "alice"
    assert result.experiment["dataset"] == "finance@alice"
    [exact] = [s for s in result.scores if s["name"] == "exact_match"]
    assert exact["mean"] == 1.0 and exact["readings"] == 3
    for run in result.runs:
        detail = dev.run(run["id"])
        assert detail["answer"] in ANSWERS.values() and detail["harness_status"] == "succeeded"
        assert detail["trajectory_source"] == "sdk" and detail["trajectory_valid"] is False
        assert "tracing.register" in detail["trajectory_errors"][0]["message"]
        assert detail["session_id"] is None
        # An instant task may end before its step to running leaves: the step to
        # collecting then carries the start.
        assert detail["started_at"] and detail["harness_done_at"] >= detail["started_at"]


def test_async_task_with_every_parameter(dev):
    dev.suite()
    dev.agent()
    seen = []

    async def task(metadata: dict, model, files: list, input: dict) -> dict:
        await asyncio.sleep(0.01)
        seen.append((metadata, model, files))
        return {"answer": ANSWERS[input["question"]]}

    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=task,
        model="gpt-test",
        repetitions=2,
        progress=False,
    )
    assert result.by_state == {"done": 6}
    assert {m["repetition"] for m, _, _ in seen} == {1, 2}
    assert {m["case_id"] for m, _, _ in seen} == {"add", "mul", "sub"}
    for metadata, model, files in seen:
        assert model == "gpt-test" and files == []
        assert metadata["experiment_id"] == result.id and metadata["tags"] == ["math"]
        assert len(metadata["session_id"]) == 36
    assert len({m["session_id"] for m, _, _ in seen}) == 6
    run = dev.run(result.runs[0]["id"])
    assert run["output"]["answer"] in ANSWERS.values()


def test_run_experiment_refuses_a_running_loop(dev):
    async def inside() -> None:
        with pytest.raises(SdkError, match="arun_experiment"):
            run_experiment(dataset="finance", agent="mine", task=lambda input: "x")

    asyncio.run(inside())


def test_arun_experiment_in_a_loop(dev):
    dev.suite()
    dev.agent()

    async def main():
        return await arun_experiment(
            dataset="finance",
            agent="mine",
            task=lambda q: ANSWERS[q["question"]],
            progress=False,
        )

    result = asyncio.run(main())
    assert result.by_state == {"done": 3}


def test_run_result_with_a_trajectory(dev):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")})
    dev.agent()

    def task(question):
        return RunResult(answer="5", trajectory=trajectory_for(question["question"], "5"))

    result = run_experiment(dataset="finance", agent="mine", task=task, progress=False)
    run = dev.run(result.runs[0]["id"], trajectory=True)
    assert run["trajectory_source"] == "sdk" and run["trajectory_valid"] is True
    assert run["trajectory"]["steps"][0]["message"] == "What is 2 + 3?"


def trajectory_for(question: str, answer: str) -> dict:
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": "s-1",
        "agent": {"name": "mine", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": question},
            {"step_id": 2, "source": "agent", "message": answer},
        ],
    }


# --------------------------------------------------------------------------- binding


def test_binding_rules_are_checked_before_the_first_call(dev):
    dev.suite()
    dev.agent()

    def needs_more(input, retries):
        raise AssertionError("never called")

    with pytest.raises(SdkError, match=r"required parameter 'retries'.*input, files, model"):
        run_experiment(dataset="finance", agent="mine", task=needs_more, progress=False)
    assert dev.api("GET", "/api/experiments").json() == []

    def task(input, retries):  # the usual name: the message reads well with it too
        raise AssertionError("never called")

    with pytest.raises(SdkError) as refused:
        run_experiment(dataset="finance", agent="mine", task=task, progress=False)
    assert str(refused.value).startswith(
        "the task function task() has the required parameter 'retries'"
    )

    def one_other_name(q):  # a single parameter of another name gets the input
        return ANSWERS[q["question"]]

    def optional_kept(input, retries=3, *args, **kwargs):
        assert retries == 3 and args == () and kwargs == {}
        return ANSWERS[input["question"]]

    for task in (one_other_name, optional_kept):
        result = run_experiment(dataset="finance", agent="mine", task=task, progress=False)
        assert result.by_state == {"done": 3}, task.__name__


def test_a_model_the_task_cannot_take_is_warned_about(dev, capsys):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")})
    dev.agent()
    result = run_experiment(
        dataset="finance", agent="mine", task=lambda input: "5", model="gpt-x", progress=False
    )
    assert result.experiment["model"] == "gpt-x"
    err = capsys.readouterr().err
    assert "warning: model='gpt-x'" in err and "no `model` parameter" in err


# --------------------------------------------------------------------------- failures


def test_a_task_that_raises_fails_its_run_and_the_rest_go_on(dev, capsys):
    dev.suite()
    dev.agent()

    def task(input: dict) -> str:
        if "6 * 7" in input["question"]:
            raise ValueError("the agent gave up")
        return ANSWERS[input["question"]]

    result = run_experiment(dataset="finance", agent="mine", task=task, progress=False)
    assert result.by_state == {"done": 2, "failed": 1}
    [failed] = [r for r in result.runs if r["state"] == "failed"]
    run = dev.run(failed["id"])
    assert run["case_id"] == "mul" and run["harness_status"] == "failed"
    assert run["error"] == "ValueError: the agent gave up" and run["answer"] is None
    assert "failed: ValueError: the agent gave up" in capsys.readouterr().err


def test_runs_whose_task_raised_read_as_failed_not_wrong(cli, dev):
    """The task raises on mul: that run is not judged (no 0), the summary counts it as
    failed, the pass rate is over the two that answered, compare and gates show it."""
    dev.suite(custom="tally: {}")
    dev.agent()
    called: list[str] = []

    @evaluator(name="tally")
    def tally(case: EvalCase, run: EvalRun) -> float:
        called.append(case.id)
        return 1.0

    def task(input: dict) -> str:
        if "6 * 7" in input["question"]:
            raise ValueError("the agent gave up")
        return ANSWERS[input["question"]]

    clean = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: ANSWERS[input["question"]],
        evaluators=[tally],
        progress=False,
    )
    called.clear()
    result = run_experiment(
        dataset="finance", agent="mine", task=task, evaluators=[tally], progress=False
    )
    assert result.by_state == {"done": 2, "failed": 1} and sorted(called) == ["add", "sub"]
    [failed] = [r for r in result.runs if r["state"] == "failed"]
    scores = dev.scores(failed["id"])
    for name in ("exact_match", "tally"):
        assert scores[name]["value"] is None, scores[name]
        assert scores[name]["skipped"].startswith("the run failed, so there is no answer")
    exact = {s["name"]: s for s in result.scores}["exact_match"]
    assert (exact["readings"], exact["failed"], exact["mean"]) == (2, 1, 1.0)
    assert exact["pass_rate"] == 1.0 and exact["pass_rate_all"] == pytest.approx(2 / 3)
    assert "exact_match: mean 1.000 over 2 runs (1 failed, not judged)" in str(result)

    shown = cli("experiments", "scores", str(result.id))
    assert "1 of 3 runs FAILED" in shown.out and "ValueError: the agent gave up" in shown.out
    compared = cli("experiments", "compare", str(clean.id), str(result.id), "--json")
    assert compared.code == 0
    assert (compared.json["failed_a"], compared.json["failed_b"]) == (0, 1)
    assert compared.json["failed_rose"] is True
    [new] = compared.json["new_failures"]
    assert new["case_id"] == "mul" and new["error"] == "ValueError: the agent gave up"
    gated = cli("experiments", "compare", str(clean.id), str(result.id), "--gate", "failed<=0")
    assert gated.code == 1 and "FAIL failed<=0" in gated.out
    allowed = cli(
        "experiments",
        "compare",
        str(clean.id),
        str(result.id),
        "--gate",
        "exact_match.pass_rate>=1",
        "--gate",
        "failed_rate<=0.34",
    )
    assert allowed.code == 0, allowed.out


def test_a_task_returning_something_else_fails_its_run(dev):
    dev.suite(cases={"add": ("What is 2 + 3?", "5")})
    dev.agent()
    result = run_experiment(dataset="finance", agent="mine", task=lambda input: 5, progress=False)
    run = dev.run(result.runs[0]["id"])
    assert run["state"] == "failed" and "returned int" in run["error"]


def test_a_harness_agent_is_refused(dev):
    dev.suite()
    r = dev.api(
        "POST",
        "/api/workspaces/alice/agents",
        json={"name": "hosted", "harness_url": "http://127.0.0.1:9"},
    )
    assert r.status_code == 201, r.text
    with pytest.raises(Exception, match=r"has a harness.*harness-agent"):
        run_experiment(dataset="finance", agent="hosted", task=lambda input: "x", progress=False)


# --------------------------------------------------------------------------- selection, resume


def test_case_ids_split_and_a_shared_dataset(dev):
    dev.suite()
    dev.agent()
    seen = []

    def task(input, metadata):
        seen.append(metadata["case_id"])
        return ANSWERS[input["question"]]

    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=task,
        case_ids=["add", "sub"],
        split="test",
        progress=False,
    )
    assert sorted(seen) == ["add", "sub"] and result.by_state == {"done": 2}
    with pytest.raises(Exception, match="no cases to run in split 'train'"):
        run_experiment(dataset="finance", agent="mine", task=task, split="train", progress=False)


def test_resume_goes_on_with_the_unfinished_runs(dev):
    dev.suite()
    dev.agent()

    async def hangs(input):
        await asyncio.Event().wait()

    async def interrupted() -> None:
        # Stopped from outside while the first run's task is busy (a notebook's interrupt).
        started = arun_experiment(
            dataset="finance", agent="mine", task=hangs, concurrency=1, progress=False
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(started, timeout=3)

    asyncio.run(interrupted())
    [experiment] = dev.api("GET", "/api/experiments").json()
    states = dev.api("GET", f"/api/experiments/{experiment['id']}").json()["by_state"]
    assert states == {"running": 1, "starting": 2}  # claimed ahead of a free slot
    with pytest.raises(SdkError, match="resume= goes on"):
        run_experiment(resume=experiment["id"], dataset="finance", task=hangs)
    again = []

    def answers(input):
        again.append(input["question"])
        return ANSWERS[input["question"]]

    result = run_experiment(resume=experiment["id"], task=answers, progress=False)
    assert result.id == experiment["id"] and result.by_state == {"done": 3}
    assert sorted(again) == sorted(ANSWERS)  # the run left running was claimed and run again
    again.clear()
    result = run_experiment(resume=experiment["id"], task=answers, progress=False)
    assert again == [] and result.by_state == {"done": 3}


def test_files_are_downloaded_before_the_call(dev):
    (dev.repo.root / "fixtures").mkdir()
    (dev.repo.root / "fixtures" / "report.csv").write_bytes(b"quarter,revenue\nq3,120\n")
    (dev.repo.root / "evalkit.yaml").write_text(
        "cases_dir: cases\nfixtures:\n  report:\n    path: fixtures/report.csv\n"
        "    context: Quarterly revenue in kEUR\n"
    )
    dev.repo.case(
        "finance",
        "q3",
        "input:\n  question: Q3 revenue?\n  files: [report]\nexpected:\n  answer: '120'\n",
    )
    dev.agent()
    seen = []

    def task(input, files):
        assert "files" not in input
        seen.extend(files)
        [report] = files
        return report.path.read_text().splitlines()[1].split(",")[1]

    result = run_experiment(
        dataset="finance", agent="mine", task=task, repetitions=2, progress=False
    )
    assert result.by_state == {"done": 2}
    first, second = seen
    assert first.name == "report" and first.context == "Quarterly revenue in kEUR"
    assert first.path == second.path and first.path.read_bytes().startswith(b"quarter")
    assert str(first.path).startswith(str(dev.repo.root.parent / "cache"))


def test_the_server_of_evalkit_yaml_is_used_when_no_url_is_set(dev, monkeypatch):
    """With EVALKIT_SERVER_URL unset, run_experiment talks to evalkit.yaml's server_url, as
    `evalkit sync` does, not to the server of the last login; the variable still wins."""
    dev.suite()
    dev.agent()
    project = dev.repo.root / "evalkit.yaml"
    project.write_text(project.read_text() + f"server_url: {dev.server.url}\n")
    monkeypatch.delenv("EVALKIT_SERVER_URL")
    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: ANSWERS[input["question"]],
        progress=False,
    )
    assert result.by_state == {"done": 3}
    assert result.url.startswith(dev.server.url)

    project.write_text(project.read_text().replace(dev.server.url, "http://127.0.0.1:9/nowhere"))
    monkeypatch.setenv("EVALKIT_SERVER_URL", dev.server.url)
    again = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: ANSWERS[input["question"]],
        progress=False,
    )
    assert again.by_state == {"done": 3}

    monkeypatch.delenv("EVALKIT_SERVER_URL")
    with pytest.raises(ServerError, match=r"server at http://127\.0\.0\.1:9/nowhere did not") as e:
        run_experiment(dataset="finance", agent="mine", task=lambda input: "x", progress=False)
    assert "EVALKIT_SERVER_URL, else evalkit.yaml's server_url" in str(e.value)


def test_a_shared_dataset_runs_as_it_stands_in_every_review_state(dev, monkeypatch):
    """``finance@dev`` and ``finance`` with ``workspace="dev"`` both run @dev's cases,
    rejected ones too; neither syncs the local ``finance`` suite (alice only reviews @dev)."""
    admin_api(dev.server, dev.admin, "POST", "/api/workspaces", json={"name": "dev"})
    admin_api(
        dev.server,
        dev.admin,
        "POST",
        "/api/workspaces/dev/members",
        json={"username": "alice", "role": "reviewer"},
    )
    monkeypatch.setenv("EVALKIT_TOKEN", dev.admin)
    sync(dev.suite(), workspace="dev")
    monkeypatch.setenv("EVALKIT_TOKEN", dev.token)
    r = dev.api("POST", "/api/workspaces/dev/cases/sub/reject", json={"comment": "unclear"})
    assert r.status_code == 200, r.text
    # alice's own copy of the suite differs: one case only, which a sync would leave
    for case in ("mul", "sub"):
        (dev.repo.suite("finance") / f"{case}.yaml").unlink()
    dev.agent()
    seen: list[str] = []

    def task(input, metadata):
        seen.append(metadata["case_id"])
        return ANSWERS[input["question"]]

    for where in ({"dataset": "finance@dev"}, {"dataset": "finance", "workspace": "dev"}):
        seen.clear()
        result = run_experiment(agent="mine", task=task, progress=False, **where)
        assert sorted(seen) == ["add", "mul", "sub"], where
        assert result.by_state == {"done": 3}
        assert result.experiment["dataset"] == "finance@dev"
        assert result.experiment["workspace"] == "alice"  # a personal agent: her workspace
    listed = dev.api("GET", "/api/workspaces/dev/datasets/finance/cases").json()
    assert len(listed) == 3  # nothing was synced into @dev
