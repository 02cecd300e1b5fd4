"""The judge of an SDK experiment, called from the SDK's process with the key from
evalkit.yaml (a real OpenAI-compatible server on loopback answering deterministically)."""

from __future__ import annotations

import pytest

from evalkit.sdk import Judge, run_experiment
from tests.integration import sdk_helpers
from tests.integration.datasets_helpers import admin_api
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer

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


def project_with_key(dev, judge_server, monkeypatch) -> None:
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
    dev.agent()


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
    admin_api(
        dev.server,
        dev.admin,
        "POST",
        "/api/llm-providers",
        json={"name": "local", "base_url": judge_server.base_url, "api_key": "a-server-key"},
    )
    admin_api(
        dev.server,
        dev.admin,
        "PUT",
        "/api/judge-default",
        json={"provider": "local", "model": "judge-default"},
    )
    result = run_experiment(
        dataset="finance", agent="mine", task=lambda input: "It is 4.", progress=False
    )
    judged = dev.scores(result.runs[0]["id"])["judge"]
    assert judged["value"] == 0.0 and judged["judge_model"] == "judge-default"
    [request] = judge_server.requests
    assert request["headers"]["authorization"] == f"Bearer {KEY}"  # evalkit.yaml's key
