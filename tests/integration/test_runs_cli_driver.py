"""Personal Harness API agents: the owner's CLI drives the runs on the owner's machine and
posts each step to the server, which records it by compare-and-set."""

from __future__ import annotations

import httpx
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
    write_suite,
)


@pytest.fixture
def engine(database_url, tmp_path):
    # The CLI drives the runs; the server's worker scores them once they are collected.
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def alice(engine, cli, tmp_path):
    """alice, logged in through the CLI environment, with her own finance suite synced."""
    admin = login_token(engine, "admin", ADMIN_PASSWORD)
    admin_api(
        engine,
        admin,
        "POST",
        "/api/users",
        json={"username": "alice", "password": "alice-password"},
    )
    token = login_token(engine, "alice", "alice-password")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    repo = Repo(tmp_path / "repo")
    suite = write_suite(repo)
    return token, suite, admin


def test_personal_agent_is_driven_by_the_cli(engine, alice, cli):
    token, suite, _ = alice
    with harness(Behaviour(run_seconds=0.1)) as ref:
        create_agent(engine, token, "alice", "mine", ref.url, max_concurrent_runs=2)
        # A suite directory is synced first, then run.
        result = cli("run", str(suite), "--agent", "mine", "--repetitions", "2", "--json")
        assert result.code == 0, result.err
        detail = result.json
        assert detail["driver"] == "cli" and detail["workspace"] == "alice"
        assert detail["by_state"] == {"done": 6}
        assert ref.counters.runs_created == 6 and ref.counters.max_live <= 2
        assert all(r["trajectory_valid"] for r in detail["run_list"])
        assert detail["capabilities"]["accepts"]["stop"] is True


def test_interrupted_cli_run_is_resumed(engine, alice, cli):
    token, suite, _ = alice
    cli("sync", str(suite))
    with harness() as ref:
        create_agent(engine, token, "alice", "mine", ref.url)
        # Start an experiment without driving it (as a CLI killed right after creating it).
        caps = httpx.get(ref.url + "/capabilities").json()
        created = api(
            engine,
            token,
            "POST",
            "/api/experiments",
            json={
                "dataset": "finance",
                "agent": "mine",
                "capabilities": caps,
            },
        )
        assert created.status_code == 201, created.text
        experiment_id = created.json()["id"]
        assert created.json()["by_state"] == {"queued": 3}
        resumed = cli("run", "--resume", str(experiment_id), "--json")
        assert resumed.code == 0, resumed.err
        assert resumed.json["by_state"] == {"done": 3}
        assert ref.counters.runs_created == 3


def test_resume_runs_the_pinned_versions_and_only_unfinished_runs(engine, alice, cli):
    token, suite, _ = alice
    assert cli("sync", str(suite)).code == 0
    with harness() as ref:
        create_agent(engine, token, "alice", "mine", ref.url)
        caps = httpx.get(ref.url + "/capabilities").json()
        body = {"dataset": "finance", "agent": "mine", "capabilities": caps}
        created = api(engine, token, "POST", "/api/experiments", json=body)
        assert created.status_code == 201, created.text
        experiment_id = created.json()["id"]
        # The case changes after the experiment started: v2 asks something else.
        (suite / "add.yaml").write_text(
            "input:\n  question: 'What is 7 + 1?'\nexpected:\n  answer: '8'\n"
            "tags: [math]\nsplit: test\n"
        )
        assert cli("sync", str(suite)).code == 0
        assert cli("cases", "show", "add", "--json").json["versions"][0]["version"] == 2
        resumed = cli("run", "--resume", str(experiment_id), "--json")
        assert resumed.code == 0, resumed.err
        runs = {r["case_id"]: r for r in resumed.json["run_list"]}
        add = cli("runs", "show", str(runs["add"]["id"]), "--json").json
        assert add["case_version"] == 1 and add["answer"] == "5"  # the pinned question
        assert ref.counters.runs_created == 3
        # Every run is terminal now: resuming again starts nothing on the harness.
        again = cli("run", "--resume", str(experiment_id), "--json")
        assert again.code == 0 and again.json["by_state"] == {"done": 3}
        assert ref.counters.runs_created == 3
        # A new experiment pins the new version.
        fresh = cli("run", "finance", "--agent", "mine", "--case-id", "add", "--json")
        [run] = fresh.json["run_list"]
        assert cli("runs", "show", str(run["id"]), "--json").json["answer"] == "8"
        # Run on the directory: the edit not synced yet is synced first, then run.
        (suite / "add.yaml").write_text(
            "input:\n  question: 'What is 9 + 1?'\nexpected:\n  answer: '10'\n"
            "tags: [math]\nsplit: test\n"
        )
        synced = cli("run", str(suite), "--agent", "mine", "--case-id", "add", "--json")
        assert synced.code == 0, synced.err
        [run] = synced.json["run_list"]
        shown = cli("runs", "show", str(run["id"]), "--json").json
        assert shown["case_version"] == 3 and shown["answer"] == "10"


def test_only_the_owner_runs_a_personal_agent(engine, alice, cli):
    token, suite, admin = alice
    cli("sync", str(suite))
    with harness() as ref:
        create_agent(engine, token, "alice", "mine", ref.url)
        caps = httpx.get(ref.url + "/capabilities").json()
        body = {"dataset": "finance@alice", "agent": "mine@alice", "capabilities": caps}
        refused = api(engine, admin, "POST", "/api/experiments", json=body)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "personal-agent-owner-only"
        assert "belongs to @alice's owner" in refused.json()["error"]["message"]
        # The same through the admin's CLI, which names the rule and the reason.
        by_cli = cli("run", "finance@alice", "--agent", "mine@alice", token=admin)
        assert by_cli.code == 1 and "[personal-agent-owner-only]" in by_cli.err
        assert "belongs to @alice's owner" in by_cli.err
        cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
        # The server never drives a personal agent: no capabilities, no experiment.
        missing = api(
            engine, token, "POST", "/api/experiments", json={"dataset": "finance", "agent": "mine"}
        )
        assert missing.status_code == 403
        assert missing.json()["error"]["code"] == "server-cannot-drive-personal-agent"
        message = missing.json()["error"]["message"]
        assert "agent mine@alice is personal, so the server" in message
        assert "`evalkit run DATASET --agent mine`" in message
        created = api(engine, token, "POST", "/api/experiments", json=body).json()
        work = api(engine, admin, "GET", f"/api/experiments/{created['id']}/work")
        assert work.status_code == 403
        run_id = api(engine, token, "GET", f"/api/experiments/{created['id']}").json()["run_list"][
            0
        ]["id"]
        step = {"run_id": run_id, "from_state": "queued", "to_state": "starting"}
        assert (
            api(engine, admin, "POST", f"/api/runs/{run_id}/transition", json=step).status_code
            == 403
        )
        jump = {"run_id": run_id, "from_state": "queued", "to_state": "done"}
        bad = api(engine, token, "POST", f"/api/runs/{run_id}/transition", json=jump)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "transition-not-allowed"
        first = api(engine, token, "POST", f"/api/runs/{run_id}/transition", json=step).json()
        replay = api(engine, token, "POST", f"/api/runs/{run_id}/transition", json=step).json()
        assert first == {"applied": True, "state": "starting"}
        assert replay == {"applied": False, "state": "starting"}


def test_missing_key_variable_is_named(engine, alice, cli):
    _, suite, _ = alice
    cli("sync", str(suite))
    with harness(api_key="s3cret") as ref:
        cli.monkeypatch.setenv("MINE_KEY", "s3cret")
        made = cli(
            "agents", "create", "mine", "--harness-url", ref.url, "--api-key-env", "MINE_KEY"
        )
        assert made.code == 0, made.err
        cli.monkeypatch.delenv("MINE_KEY")
        result = cli("run", "finance", "--agent", "mine")
        assert result.code == 1 and "$MINE_KEY" in result.err
        cli.monkeypatch.setenv("MINE_KEY", "s3cret")
        ok = cli("run", "finance", "--agent", "mine", "--json")
        assert ok.code == 0, ok.err
        assert ok.json["by_state"] == {"done": 3}
        no_wait = cli("run", "finance", "--agent", "mine", "--no-wait")
        assert no_wait.code == 2 and "--resume" in no_wait.err
