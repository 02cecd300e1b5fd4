"""run_experiment end to end against a real edge and worker: the SDK calls the task, posts
each step of every run, and the server scores and finishes the experiment."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.sdk import RunResult, SdkError, arun_experiment, run_experiment
from tests.integration import sdk_helpers

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
