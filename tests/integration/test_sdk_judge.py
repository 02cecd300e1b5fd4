"""The judge of an SDK experiment, called from the SDK's process with the key from
evalkit.yaml (a real OpenAI-compatible server on loopback answering deterministically)."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.scoring.judge import PROMPT_HASH
from evalkit.sdk import (
    Judge,
    RunResult,
    SdkError,
    arun_experiment,
    evaluate_experiment,
    run_experiment,
    tracing,
)
from tests import otel_agents
from tests.integration import sdk_helpers
from tests.integration.datasets_helpers import admin_api
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer
from tests.integration.otel_helpers import exporter, mint, recorder

engine = sdk_helpers.engine
dev = sdk_helpers.dev

KEY = "sk-from-evalkit-yaml"


@pytest.fixture
def judge_server():
    server = JudgeServer(JudgeBehaviour(api_key=KEY)).start()
    try:
        yield server
    finally:
        server.stop()


def project_with_key(dev, judge_server, monkeypatch, **agent) -> None:
    monkeypatch.setenv("SDK_JUDGE_KEY", KEY)
    (dev.repo.root / "evalkit.yaml").write_text(
        "cases_dir: cases\ncredentials:\n  llm_providers:\n"
        f"    {judge_server.base_url}:\n      api_key_env: SDK_JUDGE_KEY\n"
    )
    rubric = "judge:\n    rubric: 'Full marks if you expect \"5\" in the answer.'\n"
    dev.repo.case(
        "finance",
        "add",
        "input:\n  question: What is 2 + 3?\nevaluators:\n  exact_match: false\n  " + rubric,
    )
    dev.agent(**agent)


def test_a_judge_given_to_run_experiment(dev, judge_server, monkeypatch):
    project_with_key(dev, judge_server, monkeypatch)
    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: "It is 5.",
        judge=Judge(base_url=judge_server.base_url, model="judge-sdk"),
        progress=False,
    )
    judged = dev.scores(result.runs[0]["id"])["judge"]
    assert judged["value"] == 1.0 and judged["evaluator"] == "judge"
    assert judged["judge_model"] == "judge-sdk" and judged["prompt_hash"]
    assert judged["raw"] == {"judge_base_url": judge_server.base_url}
    [request] = judge_server.requests  # called once, from this process; not by the server
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert request["body"]["model"] == "judge-sdk"


def test_the_servers_default_judge_is_called_from_the_sdk(dev, judge_server, monkeypatch):
    project_with_key(dev, judge_server, monkeypatch)
    default_judge(dev, judge_server)
    result = run_experiment(
        dataset="finance", agent="mine", task=lambda input: "It is 4.", progress=False
    )
    judged = dev.scores(result.runs[0]["id"])["judge"]
    assert judged["value"] == 0.0 and judged["judge_model"] == "judge-default"
    [request] = judge_server.requests
    assert request["headers"]["authorization"] == f"Bearer {KEY}"  # evalkit.yaml's key


# --------------------------------------------------------------------------- traced runs


@pytest.fixture
def traced(dev, judge_server, monkeypatch):
    """The project, and this process traces (tracing.register): every run waits for its
    trajectory, which the server builds from its spans."""
    project_with_key(dev, judge_server, monkeypatch)
    provider = TracerProvider()
    tracing.register(agent="mine", provider=provider)
    try:
        yield provider
    finally:
        tracing.unregister()
        provider.shutdown()


def default_judge(dev, judge_server, key: str = "a-server-key") -> None:
    admin_api(
        dev.server,
        dev.admin,
        "POST",
        "/api/llm-providers",
        json={"name": "local", "base_url": judge_server.base_url, "api_key": key},
    )
    admin_api(
        dev.server,
        dev.admin,
        "PUT",
        "/api/judge-default",
        json={"provider": "local", "model": "judge-default"},
    )


def judge_scores(dev, run_id: int) -> list[dict]:
    """Every judge score of the run, whatever its name or round."""
    r = dev.api("GET", f"/api/runs/{run_id}/scores")
    assert r.status_code == 200, r.text
    return [s for s in r.json() if s["evaluator"] == "judge"]


def experiment_judge(dev, experiment_id: int) -> dict | None:
    r = dev.api("GET", f"/api/experiments/{experiment_id}")
    assert r.status_code == 200, r.text
    return r.json().get("judge")


def answering(tracer, answer: str):
    def task(input: dict) -> str:
        with tracer.start_as_current_span(
            "ChatCompletion",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": answer,
            },
        ):
            pass
        return answer

    return task


def test_the_judge_is_named_only_when_a_case_has_a_rubric(dev, judge_server, monkeypatch, capsys):
    """A default judge exists, but the dataset's cases have no rubric: no judge line; once a
    case has one, the line says which judge grades it, from this process."""
    default_judge(dev, judge_server)
    project_with_key(dev, judge_server, monkeypatch)
    dev.repo.case("plain", "plain-add", "input:\n  question: What is 2 + 3?\n")
    run_experiment(dataset="plain", agent="mine", task=lambda input: "5", progress=False)
    assert "judge:" not in capsys.readouterr().err
    assert judge_server.requests == []
    run_experiment(dataset="finance", agent="mine", task=lambda input: "5", progress=False)
    err = capsys.readouterr().err
    assert "judge: local/judge-default: judge-default at " in err, err


def test_traced_runs_are_graded_by_the_judge_given_to_run_experiment(dev, judge_server, traced):
    default_judge(dev, judge_server, key=KEY)  # the server could grade them too: it must not
    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=answering(traced.get_tracer("agent"), "It is 5."),
        repetitions=2,
        judge=Judge(base_url=judge_server.base_url, model="judge-sdk"),
        progress=False,
    )
    assert result.by_state == {"done": 2}
    for run in result.runs:
        assert dev.run(run["id"])["trajectory_source"] == "otel"
        [judged] = judge_scores(dev, run["id"])  # exactly one judge score per run
        assert judged["value"] == 1.0 and judged["judge_model"] == "judge-sdk"
        assert judged["raw"] == {"judge_base_url": judge_server.base_url}
    # One call per run, all from this process with evalkit.yaml's key; none by the server.
    assert [r["body"]["model"] for r in judge_server.requests] == ["judge-sdk", "judge-sdk"]
    assert {r["headers"]["authorization"] for r in judge_server.requests} == {f"Bearer {KEY}"}
    # The answer the judge read is the one the server built from the spans.
    assert "It is 5." in judge_server.user_messages(0)[0]
    assert experiment_judge(dev, result.id) == {
        "name": "sdk:judge-sdk",
        "by": "sdk",
        "model": "judge-sdk",
        "base_url": judge_server.base_url,
        "prompt_hash": PROMPT_HASH,
    }


def test_with_no_judge_given_the_default_judge_grades_traced_runs_from_the_sdk(
    dev, judge_server, traced
):
    default_judge(dev, judge_server)  # the server's key is not the one the judge takes
    result = run_experiment(
        dataset="finance",
        agent="mine",
        task=answering(traced.get_tracer("agent"), "It is 4."),
        progress=False,
    )
    [judged] = judge_scores(dev, result.runs[0]["id"])
    assert judged["value"] == 0.0 and judged["judge_model"] == "judge-default", judged
    [request] = judge_server.requests
    assert request["headers"]["authorization"] == f"Bearer {KEY}"  # evalkit.yaml's key
    found = experiment_judge(dev, result.id)
    assert found is not None
    assert (found["name"], found["by"]) == ("local/judge-default", "sdk")


def test_with_no_judge_anywhere_the_server_records_why_and_no_judge(dev, judge_server, monkeypatch):
    project_with_key(dev, judge_server, monkeypatch)
    result = run_experiment(
        dataset="finance", agent="mine", task=lambda input: "It is 5.", progress=False
    )
    [judged] = judge_scores(dev, result.runs[0]["id"])
    assert judged["value"] is None and "no default judge is set" in judged["error"]
    assert experiment_judge(dev, result.id) is None and judge_server.requests == []


def test_experiments_show_which_judge_graded_them(dev, judge_server, monkeypatch, cli):
    """Two experiments of the same cases, one graded by the SDK's judge and one by the
    server's: each says which, so a comparison can tell they were judged differently."""
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", dev.server.url)  # the cli fixture cleared them
    cli.monkeypatch.setenv("EVALKIT_TOKEN", dev.token)
    project_with_key(dev, judge_server, monkeypatch)
    by_sdk = run_experiment(
        dataset="finance",
        agent="mine",
        task=lambda input: "It is 5.",
        judge=Judge(base_url=judge_server.base_url, model="judge-sdk"),
        progress=False,
    )

    def sets_a_default_first(input: dict) -> str:
        # No default judge when run_experiment started, so the server grades the rubrics;
        # there is one by the time it does.
        default_judge(dev, judge_server, key=KEY)
        return "It is 5."

    by_server = run_experiment(
        dataset="finance", agent="mine", task=sets_a_default_first, progress=False
    )
    [judged] = judge_scores(dev, by_server.runs[0]["id"])
    assert judged["value"] == 1.0 and judged["judge_model"] == "judge-default"
    assert judge_server.requests[-1]["headers"]["authorization"] == f"Bearer {KEY}"
    assert experiment_judge(dev, by_server.id) == {
        "name": "local/judge-default",
        "by": "server",
        "model": "judge-default",
        "base_url": judge_server.base_url,
        "prompt_hash": PROMPT_HASH,
    }
    shown = cli("experiments", "show", str(by_sdk.id))
    assert shown.code == 0, shown.err
    assert f"judge sdk:judge-sdk at {judge_server.base_url}, called by the SDK" in shown.out
    shown = cli("experiments", "show", str(by_server.id))
    assert f"judge local/judge-default at {judge_server.base_url}, called by the server" in (
        shown.out
    )
    listed = cli("experiments", "show", str(by_server.id), "--json")
    assert listed.json["judge"]["name"] == "local/judge-default"


def test_a_resumed_experiment_keeps_its_judge(dev, judge_server, monkeypatch):
    project_with_key(dev, judge_server, monkeypatch)
    given = Judge(base_url=judge_server.base_url, model="judge-sdk")

    async def hangs(input):
        await asyncio.Event().wait()

    async def interrupted() -> None:
        started = arun_experiment(
            dataset="finance",
            agent="mine",
            task=hangs,
            repetitions=2,
            concurrency=1,
            judge=given,
            progress=False,
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(started, timeout=3)

    asyncio.run(interrupted())
    [experiment] = dev.api("GET", "/api/experiments").json()
    assert experiment["judge"]["name"] == "sdk:judge-sdk"
    other = Judge(base_url=judge_server.base_url, model="another-model")
    with pytest.raises(SdkError, match="is graded by sdk:judge-sdk"):
        run_experiment(resume=experiment["id"], task=lambda input: "It is 5.", judge=other)
    result = run_experiment(resume=experiment["id"], task=lambda input: "It is 5.", progress=False)
    assert result.by_state == {"done": 2}
    for run in result.runs:
        [judged] = judge_scores(dev, run["id"])
        assert judged["judge_model"] == "judge-sdk" and judged["value"] == 1.0
    assert [r["body"]["model"] for r in judge_server.requests] == ["judge-sdk", "judge-sdk"]


def test_rescoring_a_late_trajectory_asks_the_same_judge_again(dev, judge_server, monkeypatch):
    project_with_key(dev, judge_server, monkeypatch, trajectory_wait=0.5)

    def task(input):
        # The agent's exporter is late: no span arrives within the trajectory wait.
        return RunResult(answer="It is 5.", session_id="late-session")

    given = Judge(base_url=judge_server.base_url, model="judge-sdk")
    result = run_experiment(dataset="finance", agent="mine", task=task, judge=given, progress=False)
    run_id = result.runs[0]["id"]
    assert dev.run(run_id)["trajectory_valid"] is False
    with recorder() as (tracer, memory):
        otel_agents.openinference_agent(tracer, session="late-session")
        spans = memory.get_finished_spans()
    token = mint(dev.server, dev.token, "alice", "mine")
    assert exporter(dev.server, token).export(spans) == SpanExportResult.SUCCESS

    evaluate_experiment(experiment_id=result.id, refetch_trajectories=True)
    assert dev.run(run_id)["trajectory_valid"] is True
    rounds = {}
    for judged in judge_scores(dev, run_id):
        assert judged["round"] not in rounds  # one judge score per run and round
        rounds[judged["round"]] = judged
    assert sorted(rounds) == [1, 2]
    assert rounds[2]["judge_model"] == "judge-sdk" and rounds[2]["value"] == 1.0
    # Round 2 is the same judge's verdict on the new trajectory, asked from this process.
    assert [r["body"]["model"] for r in judge_server.requests] == ["judge-sdk", "judge-sdk"]
    assert "get_weather" in judge_server.user_messages(1)[0]


def test_a_judge_goes_only_with_an_sdk_experiment(dev):
    dev.suite()
    dev.agent()
    judge = {"model": "m", "base_url": "https://llm.example.com/v1"}
    r = dev.api(
        "POST",
        "/api/experiments",
        json={"dataset": "finance", "agent": "mine", "judge": judge},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "judge-needs-sdk", r.text
