"""Server-driven experiments: `evalkit run` over a shared agent, the reference harness on
loopback, the worker's jobs moving every run through the state machine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import psycopg
import pytest

from evalkit.harness.reference import Behaviour
from evalkit.otel.mapping import load_starter
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, add_user, admin_api, simple_case
from tests.integration.runs_helpers import (
    UNGUARDED,
    api,
    create_agent,
    engine_server,
    harness,
    login_token,
    until,
    wait_finished,
    write_suite,
)


@pytest.fixture
def engine(database_url, tmp_path):
    running = engine_server(database_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def dev(engine, cli, tmp_path):
    """@dev with the finance suite synced; the CLI logged in as admin."""
    token = login_token(engine, "admin", ADMIN_PASSWORD)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
    admin_api(engine, token, "POST", "/api/workspaces", json={"name": "dev"})
    repo = Repo(tmp_path / "repo")
    suite = write_suite(repo)
    synced = cli("sync", str(suite), "--workspace", "dev")
    assert synced.code == 0, synced.err
    return token


def test_run_end_to_end(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--json")
        assert result.code == 0, result.err
        detail = result.json
        assert detail["status"] == "finished" and detail["driver"] == "server"
        assert detail["by_state"] == {"done": 3}
        assert detail["workspace"] == "dev"
        runs = {r["case_id"]: r for r in detail["run_list"]}
        assert set(runs) == {"add", "mul", "sub"}
        assert all(r["trajectory_valid"] is True for r in runs.values())
        assert ref.counters.runs_created == 3
        assert all(n == 1 for n in ref.counters.starts.values())
        one = cli("runs", "show", str(runs["mul"]["id"]), "--json").json
        assert one["answer"] == "42" and one["harness_status"] == "succeeded"
        summary = one["trajectory_summary"]
        assert summary["tool_calls"] == 1 and summary["tool_names"] == ["calculator"], summary
        shown = cli("experiments", "show", str(detail["id"]))
        assert shown.code == 0 and "mul" in shown.out and "valid" in shown.out
        assert f"experiment {detail['id']} (finished) in @dev" in shown.out
        assert "agent ref@dev, dataset finance@dev, driven by the server" in shown.out
        assert "runs: 3 (3 done)" in shown.out
        text = cli("runs", "show", str(runs["mul"]["id"]))
        assert text.code == 0, text.err
        assert "case mul v1 #1" in text.out and "state done;" in text.out
        assert "answer: 42" in text.out and "output: {'result': 42}" in text.out
        assert "trajectory (harness): valid" in text.out and "tool_calls: 1" in text.out
        listed = cli("experiments", "list", "--json").json
        assert [e["id"] for e in listed] == [detail["id"]]


def test_repetitions_and_case_filter(engine, dev, cli, tmp_path):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli(
            "run",
            "finance@dev",
            "--agent",
            "ref@dev",
            "--case-id",
            "add",
            "--case-id",
            "sub",
            "--repetitions",
            "3",
            "--json",
        )
        assert result.code == 0, result.err
        pairs = sorted((r["case_id"], r["repetition"]) for r in result.json["run_list"])
        assert pairs == [(c, n) for c in ("add", "sub") for n in (1, 2, 3)]
        assert ref.counters.runs_created == 6
        unknown = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "nope")
        assert unknown.code == 1 and "no case 'nope'" in unknown.err
        split = cli("run", "finance@dev", "--agent", "ref@dev", "--split", "train")
        assert split.code == 1 and "no cases to run in split 'train'" in split.err
        repo = Repo(tmp_path / "mixed-repo")
        for case_id, case_split in (("s1", "smoke"), ("s2", "smoke"), ("f1", "full")):
            repo.case(
                "mixed", case_id, f"input:\n  question: 'What is 1 + 1?'\nsplit: {case_split}\n"
            )
        assert cli("sync", str(repo.suite("mixed")), "--workspace", "dev").code == 0
        smoke = cli("run", "mixed@dev", "--agent", "ref@dev", "--split", "smoke", "--json")
        assert smoke.code == 0, smoke.err
        assert sorted(r["case_id"] for r in smoke.json["run_list"]) == ["s1", "s2"]
        both = cli(
            "run", "mixed@dev", "--agent", "ref@dev", "--split", "smoke", "--case-id", "s2",
            "--json",
        )  # fmt: skip
        assert [r["case_id"] for r in both.json["run_list"]] == ["s2"]


def test_model_is_sent_with_every_run(engine, dev, cli):
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli(
            "run", "finance@dev", "--agent", "ref@dev", "--model", "m-7", "--repetitions", "2",
            "--json",
        )  # fmt: skip
        assert result.code == 0, result.err
        assert result.json["model"] == "m-7"
        run_ids = [str(r["id"]) for r in result.json["run_list"]]
        assert len(run_ids) == 6
        assert {ref.state.by_evalkit_id[i].model for i in run_ids} == {"m-7"}
        run = cli("runs", "show", run_ids[0], "--json", "--trajectory").json
        assert run["trajectory"]["agent"]["model_name"] == "m-7"
        shown = cli("experiments", "show", str(result.json["id"]))
        assert "repetitions 2, model m-7" in shown.out
        plain = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert plain.json["model"] is None
        [rid] = [str(r["id"]) for r in plain.json["run_list"]]
        assert ref.state.by_evalkit_id[rid].model is None


def test_review_never_filters_a_run(engine, dev, cli):
    # In a shared workspace synced cases wait for review; rejected ones still run.
    assert cli("cases", "reject", "add@dev", "--comment", "ambiguous").code == 0
    assert cli("cases", "approve", "mul@dev").code == 0
    states = {
        c: cli("cases", "show", f"{c}@dev", "--json").json["versions"][0]["review_state"]
        for c in ("add", "mul", "sub")
    }
    assert states == {"add": "rejected", "mul": "approved", "sub": "pending"}
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--json")
        assert result.code == 0, result.err
        assert sorted(r["case_id"] for r in result.json["run_list"]) == ["add", "mul", "sub"]
        assert result.json["by_state"] == {"done": 3} and ref.counters.runs_created == 3


def _start_without_waiting(cli, count: int) -> list[int]:
    """The ids of ``count`` experiments of finance@dev on ref@dev, started one after another."""
    ids = []
    for _ in range(count):
        started = cli("run", "finance@dev", "--agent", "ref@dev", "--no-wait", "--json")
        assert started.code == 0, started.err
        ids.append(started.json["id"])
    return ids


def test_max_concurrent_runs_is_respected_across_experiments(engine, dev, cli):
    with harness(Behaviour(run_seconds=0.3)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, max_concurrent_runs=2)
        ids = _start_without_waiting(cli, 3)
        for experiment_id in ids:
            assert wait_finished(engine, dev, experiment_id)["by_state"] == {"done": 3}
        assert ref.counters.runs_created == 9
        assert ref.counters.max_live == 2


def test_an_experiment_closes_when_its_last_run_hands_its_slot_to_another(
    engine, dev, cli, database_url
):
    """A run that ends claims the agent's next queued run; when that run is another
    experiment's, the ended run's experiment is closed at once (the close is skipped only
    when the claimed run keeps the same experiment open), not left to the sweep. Each run
    takes 0.5 s, the margin the close has before the second experiment's first run ends."""
    with harness(Behaviour(run_seconds=0.5)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, max_concurrent_runs=1)
        ids = _start_without_waiting(cli, 2)
        assert wait_finished(engine, dev, ids[1])["by_state"] == {"done": 3}
    with psycopg.connect(database_url) as conn:
        [first_closed] = conn.execute(
            "SELECT finished_at FROM experiments WHERE id = %s", (ids[0],)
        ).fetchone()
        [second_first_end] = conn.execute(
            "SELECT min(finished_at) FROM runs WHERE experiment_id = %s", (ids[1],)
        ).fetchone()
    assert first_closed is not None, "the first experiment was left open"
    assert first_closed < second_first_end


def test_max_concurrent_runs_holds_across_two_worker_processes(engine, dev, cli, tmp_path):
    """A second `evalkit worker` process on the same database, beside the server's own:
    both take the agent's runs, and together they never have more than its limit live."""
    import os
    import subprocess
    import sys
    import threading

    import psycopg

    settings = engine.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update(
        EVALKIT_DATABASE_URL=engine.db_url,
        EVALKIT_ENCRYPTION_KEY=settings.encryption_key,
        EVALKIT_DATA_DIR=str(tmp_path / "worker-two"),
        EVALKIT_EGRESS_ALLOW_PRIVATE="true",
        EVALKIT_WORKER_CONCURRENCY="8",
        EVALKIT_WORKER_HARNESS_TIMEOUT_SECONDS=str(settings.worker.harness_timeout_seconds),
        EVALKIT_WORKER_HARNESS_ATTEMPTS=str(settings.worker.harness_attempts),
        EVALKIT_WORKER_RETRY_BACKOFF_SECONDS=str(settings.worker.retry_backoff_seconds),
        EVALKIT_WORKER_JOB_POLL_SECONDS="0.1",
    )
    log = (tmp_path / "worker-two.log").open("wb")
    evalkit = str(Path(sys.executable).parent / "evalkit")
    proc = subprocess.Popen(
        [evalkit, "worker"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
    )
    seen: set[int] = set()
    done = threading.Event()

    def workers_doing_runs() -> None:
        with psycopg.connect(engine.db_url, autocommit=True) as conn:
            while not done.is_set():
                rows = conn.execute(
                    "SELECT DISTINCT worker_id FROM procrastinate_jobs WHERE status = 'doing' "
                    "AND task_name = 'advance_run' AND worker_id IS NOT NULL"
                ).fetchall()
                seen.update(r[0] for r in rows)
                done.wait(0.01)

    try:

        def registered() -> int:
            assert proc.poll() is None, (tmp_path / "worker-two.log").read_text()
            with psycopg.connect(engine.db_url) as conn:
                return conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0]

        until(lambda: registered() >= 2, timeout=60, what="the second worker to register")
        watcher = threading.Thread(target=workers_doing_runs, daemon=True)
        watcher.start()
        with harness(Behaviour(run_seconds=0.4)) as ref:
            create_agent(engine, dev, "dev", "ref", ref.url, max_concurrent_runs=2)
            # Which worker wins a job is the queue's choice, so one round of experiments may
            # all land on one of them; rounds go on until both were seen driving runs.
            rounds = 0
            while len(seen) < 2 and rounds < 6:
                rounds += 1
                ids = []
                for _ in range(4):
                    started = cli("run", "finance@dev", "--agent", "ref@dev", "--no-wait", "--json")
                    assert started.code == 0, started.err
                    ids.append(started.json["id"])
                for experiment_id in ids:
                    assert wait_finished(engine, dev, experiment_id)["by_state"] == {"done": 3}
                assert ref.counters.runs_created == 12 * rounds
                assert ref.counters.max_live == 2
        done.set()
        watcher.join(5)
        assert len(seen) >= 2, f"only workers {seen} drove runs in {rounds} rounds"
    finally:
        done.set()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def test_timeout_with_stop(engine, dev, cli):
    with harness(Behaviour(run_seconds=math.inf, stop_seconds=0.1)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, run_timeout=0.3, stop_grace=5)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert result.code == 0, result.err
        run = result.json["run_list"][0]
        assert run["state"] == "done" and run["timed_out"] is True
        assert run["trajectory_partial"] is False  # the harness reported stopped in time
        assert sum(ref.counters.stops.values()) == 1
        assert ref.counters.calls["trajectory"] == 1


def test_timeout_when_the_harness_ignores_stop(engine, dev, cli):
    with harness(Behaviour(run_seconds=math.inf, ignore_stop=True)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, run_timeout=0.3, stop_grace=0.3)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        run = result.json["run_list"][0]
        assert run["timed_out"] is True and run["trajectory_partial"] is True
        assert "stop grace" in run["error"]
        # Past the grace the trajectory is fetched once, as it is, and kept marked partial.
        assert ref.counters.calls["trajectory"] == 1
        assert sum(ref.counters.stops.values()) == 1
        # experiments show: runs by state, the run's seconds, its trajectory and error.
        shown = cli("experiments", "show", str(result.json["id"]))
        assert shown.code == 0, shown.err
        assert "runs: 1 (1 done)" in shown.out
        lines = shown.out.splitlines()
        [row] = [line for line in lines if line.lstrip().startswith(str(run["id"]))]
        assert "done (timed out)" in row and "valid, partial" in row
        assert "timed out after 0.3 s" in row
        seconds = float(row.split("(timed out)")[1].split()[0])
        assert 0.3 <= seconds < 30, row
        # runs show: state, the harness's status, the error, answer and trajectory summary.
        text = cli("runs", "show", str(run["id"]))
        assert text.code == 0, text.err
        assert "state done (timed out); harness run ref-" in text.out
        assert "(running)" in text.out and "error: timed out after 0.3 s" in text.out
        assert "answer: -" in text.out
        assert "trajectory (harness): valid, partial" in text.out


def test_timeout_without_stop_capability(engine, dev, cli):
    with harness(Behaviour(run_seconds=math.inf, without=frozenset({"stop"}))) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, run_timeout=0.3)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        run = result.json["run_list"][0]
        assert run["timed_out"] is True and "does not accept stop" in run["error"]
        assert sum(ref.counters.stops.values()) == 0


def test_the_run_timeout_bounds_a_run_whose_polls_hang(engine, dev, cli):
    """Every GET /runs/{id} hangs: the run still ends soon after its deadline, timed out,
    with the stop sent and the trajectory fetched once, instead of retrying its polls past
    the deadline until it errors (worker.harness_timeout_seconds = 2 here)."""
    from datetime import datetime

    with harness(Behaviour(run_seconds=math.inf, hang_first={"status": 1000})) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url, run_timeout=1, stop_grace=1)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert result.code == 0, result.err
        run = cli("runs", "show", str(result.json["run_list"][0]["id"]), "--json").json
        assert run["state"] == "done" and run["timed_out"] is True, run
        assert run["stop_requested_at"] is not None
        assert sum(ref.counters.stops.values()) == 1
        assert ref.counters.calls["trajectory"] == 1 and run["trajectory_partial"] is True
        assert run["error"].startswith(
            "timed out after 1 s; the harness was asked to stop but could not be polled "
            "within the 1 s stop grace"
        )
        [stopping] = [e for e in run["events"] if e["to_state"] == "stopping"]
        assert "its last poll failed" in stopping["why"]
    deadline, finished = (datetime.fromisoformat(run[k]) for k in ("deadline_at", "finished_at"))
    # Past the deadline: the stop, the 1 s grace, one bounded poll, the trajectory, scoring.
    assert (finished - deadline).total_seconds() < 5, (deadline, finished)
    assert not any(e["to_state"] == "errored" for e in run["events"])


def test_harness_errors_are_retried_then_fail_the_run(engine, dev, cli):
    with harness(Behaviour(fail_first={"start": 2})) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert result.code == 0, result.err  # two 503s, then the third attempt works
        assert result.json["by_state"] == {"done": 1}
    with harness(Behaviour(garbage_status=True, run_seconds=0.2)) as bad:
        create_agent(engine, dev, "dev", "garbled", bad.url)
        result = cli("run", "finance@dev", "--agent", "garbled@dev", "--case-id", "add", "--json")
        assert result.code == 1
        run = result.json["run_list"][0]
        assert run["state"] == "errored" and "after 3 attempts" in run["error"]
        assert "not JSON" in run["error"]


def test_harness_errors_that_persist_end_the_run_errored_with_the_reason(engine, dev, cli):
    """5xx, a hang and a harness that went away (connection refused), on every poll: each
    run is retried worker.harness_attempts (3) times, then errored with the last reason."""
    with (
        harness(Behaviour(run_seconds=math.inf, fail_first={"status": 10**6})) as failing,
        harness(Behaviour(run_seconds=math.inf, hang_first={"status": 10**6})) as hanging,
        harness(Behaviour(run_seconds=math.inf)) as vanishing,
    ):
        started = {}
        for name, ref in (("failing", failing), ("hanging", hanging), ("vanishing", vanishing)):
            create_agent(engine, dev, "dev", name, ref.url)
            result = cli(
                "run", "finance@dev", "--agent", f"{name}@dev", "--case-id", "add", "--no-wait",
                "--json",
            )  # fmt: skip
            assert result.code == 0, result.err
            started[name] = result.json["id"]

        def vanishing_run_state() -> str:
            detail = api(engine, dev, "GET", f"/api/experiments/{started['vanishing']}").json()
            return detail["run_list"][0]["state"]

        until(lambda: vanishing_run_state() == "running", what="the run to be running")
        vanishing.stop()  # its port now refuses connections
        reasons = {
            "failing": "answered 503",
            "hanging": "no answer in time",
            "vanishing": "cannot connect",
        }
        for name, reason in reasons.items():
            detail = wait_finished(engine, dev, started[name])
            [run] = detail["run_list"]
            assert run["state"] == "errored", (name, run)
            assert run["error"].startswith("polling the run (after 3 attempts): GET "), run
            assert reason in run["error"], (name, run["error"])
        assert failing.counters.calls["status"] == 3
        assert hanging.counters.calls["status"] == 3
        shown = cli("experiments", "show", str(started["failing"]))
        assert "errored" in shown.out and "polling the run (after 3 attempts)" in shown.out


def test_unreachable_harness_and_failed_runs(engine, dev, cli):
    with harness(Behaviour(fail_runs=True)) as ref:
        create_agent(engine, dev, "dev", "failing", ref.url)
        result = cli("run", "finance@dev", "--agent", "failing@dev", "--json")
        assert result.code == 1
        assert result.json["by_state"] == {"failed": 3}
        url = ref.url
    create_agent(engine, dev, "dev", "gone", url)
    refused = cli("run", "finance@dev", "--agent", "gone@dev")
    assert refused.code == 1 and "[harness-unreachable]" in refused.err


def test_invalid_trajectory_is_stored_with_its_errors(engine, dev, cli):
    with harness(Behaviour(invalid_trajectory=True)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        run_id = result.json["run_list"][0]["id"]
        run = cli("runs", "show", str(run_id), "--json", "--trajectory").json
        assert run["state"] == "done" and run["trajectory_valid"] is False
        assert run["trajectory_errors"] and all(e["rule"] for e in run["trajectory_errors"])
        assert run["trajectory"] is not None
        shown = cli("runs", "show", str(run_id))
        assert "INVALID" in shown.out


def test_a_nul_in_the_harness_answer_is_stored_as_a_replacement_character(engine, dev, cli):
    """PostgreSQL holds no NUL in text or JSON: the run's answer and its trajectory keep
    U+FFFD in its place, and the run ends done at once (refused, the write was retried with
    growing waits until the job gave up)."""
    with harness(Behaviour(nul_in_answer=True)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "mul", "--json")
        assert result.code == 0, result.err
        run_id = result.json["run_list"][0]["id"]
        run = cli("runs", "show", str(run_id), "--json", "--trajectory").json
    assert run["state"] == "done" and run["answer"] == "42\ufffd"
    assert run["trajectory_valid"] is True
    final = run["trajectory"]["steps"][-1]["message"]
    assert final == "42\ufffd" and "\x00" not in json.dumps(run)


def test_code_driven_agent_is_refused_by_run(engine, dev, cli):
    admin_api(
        engine,
        dev,
        "POST",
        "/api/workspaces/dev/agents",
        json={
            "name": "sdk-agent",
            "trajectory_source": "otel",
            "mapping": load_starter("openinference"),
        },
    )
    refused = cli("run", "finance@dev", "--agent", "sdk-agent@dev")
    assert refused.code == 1 and "[code-driven-agent]" in refused.err


def test_resume_redispatches_live_runs(engine, dev, cli):
    with harness(Behaviour(run_seconds=0.2)) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        started = cli("run", "finance@dev", "--agent", "ref@dev", "--no-wait", "--json").json
        resumed = cli("run", "--resume", str(started["id"]), "--json")
        assert resumed.code == 0, resumed.err
        assert resumed.json["by_state"] == {"done": 3}
        assert ref.counters.runs_created == 3
        again = cli("run", "--resume", str(started["id"]), "--json")
        assert again.code == 0 and again.json["by_state"] == {"done": 3}
        assert ref.counters.runs_created == 3
        assert api(engine, dev, "GET", "/api/experiments/999").status_code == 404


@pytest.mark.parametrize("lacks", [frozenset(), frozenset({"file_urls"})])
def test_input_files_by_signed_url_or_inline(engine, dev, cli, tmp_path, lacks):
    repo = Repo(tmp_path / "files-repo")
    data = b"quarterly numbers\n" * 100
    repo.fixture("report", data)
    # The fixture registry's description travels with the file (seed page 002, "context").
    (repo.root / "evalkit.yaml").write_text(
        "cases_dir: cases\nfixtures:\n  report:\n    path: fixtures/report.bin\n"
        "    context: Quarterly numbers in kEUR\n"
    )
    repo.case("docs", "read", simple_case(question="Summarize", files="report"))
    assert cli("sync", str(repo.suite("docs")), "--workspace", "dev").code == 0
    with harness(Behaviour(without=lacks)) as ref:
        create_agent(engine, dev, "dev", "reader", ref.url)
        result = cli("run", "docs@dev", "--agent", "reader@dev", "--json")
        assert result.code == 0, result.err
        run_id = str(result.json["run_list"][0]["id"])
        run = cli("runs", "show", run_id, "--json").json
        # With file_urls the harness fetched the bytes through a signed URL of the server
        # (no login); without, they came inline. Either way it read all of them.
        assert f"report ({len(data)} bytes)" in run["answer"]
        [sent] = ref.files_for(run_id)
        assert (sent.name, sent.context) == ("report", "Quarterly numbers in kEUR")


def test_where_experiments_land_and_who_may_start_them(engine, dev, cli, tmp_path):
    """Seed rows 5-7: anyone logged in (bob reviews dev, carol is no member) starts a
    server-driven experiment of a shared dataset with a shared agent, kept in the dataset's
    workspace, and runs the release gate on @prod; they still write nothing else there."""
    bob = add_user(engine, dev, "bob", member_of="dev", role="reviewer")
    carol = add_user(engine, dev, "carol")
    admin_api(engine, dev, "POST", "/api/workspaces", json={"name": "prod"})
    repo = Repo(tmp_path / "repo")  # the dev fixture's suite, synced into prod too
    assert cli("sync", str(repo.suite("finance")), "--workspace", "prod").code == 0
    assert cli("workspaces", "promote-to", "dev", "prod").code == 0
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        create_agent(engine, dev, "prod", "ref", ref.url)
        # row 5: a reviewer's regression run, kept in @dev
        regression = cli("run", "finance@dev", "--agent", "ref@dev", "--json", token=bob)
        assert regression.code == 0, regression.err
        shown = regression.json
        where = (shown["workspace"], shown["driver"], shown["created_by"])
        assert where == ("dev", "server", "bob")
        # row 6: dev's cases against the prod agent, kept in @dev
        cross = cli("run", "finance@dev", "--agent", "ref@prod", "--json", token=carol)
        assert cross.code == 0, cross.err
        assert cross.json["workspace"] == "dev" and cross.json["created_by"] == "carol"
        # row 7: the release gate on @prod (a promotion target) by someone who is no member
        gate = []
        for _ in range(2):
            released = cli("run", "finance@prod", "--agent", "ref@prod", "--json", token=carol)
            assert released.code == 0, released.err
            assert released.json["workspace"] == "prod"
            gate.append(str(released.json["id"]))
        passed = cli("experiments", "compare", *gate, "--gate-no-regressions", token=carol)
        assert passed.code == 0, passed.err
        # anyone who may start it may resume it (the API the CLI's --resume calls)
        resumed = cli("run", "--resume", str(shown["id"]), "--json", token=carol)
        assert resumed.code == 0, resumed.err
        # starting is all that is open: bob still writes nothing in @dev
        refusals = [
            ("sync", str(repo.suite("finance")), "--workspace", "dev"),
            ("schedules", "create", "finance@dev", "--agent", "ref@dev", "--cron", "0 3 * * *"),
            ("evaluate", str(shown["id"])),
            ("agents", "create", "mine", "--workspace", "dev", "--harness-url", ref.url),
        ]
        for words in refusals:
            refused = cli(*words, token=bob)
            assert refused.code == 1 and "[shared-writers-write]" in refused.err, words
            assert "bob is not a writer of @dev" in refused.err, words
        approve = cli("cases", "approve", "add@dev", token=carol)
        assert approve.code == 1 and "[reviewers-review]" in approve.err
        # runs bob's own code would report into @dev are writes: a shared code-driven agent
        sdkbot = {"name": "sdkbot", "mapping": load_starter("openinference")}
        admin_api(engine, dev, "POST", "/api/workspaces/dev/agents", json=sdkbot)
        body = {"dataset": "finance@dev", "agent": "sdkbot@dev", "sdk": True}
        refused = api(engine, bob, "POST", "/api/experiments", json=body)
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "shared-writers-write"
        assert "runs your own code reports" in error["message"]
        assert api(engine, dev, "POST", "/api/experiments", json=body).status_code == 201
        # bob's own copy of the suite with the shared agent: the run lands in @bob, and
        # only bob resumes it there
        mine = Repo(tmp_path / "bob-repo")
        write_suite(mine, "mine")
        result = cli("run", str(mine.suite("mine")), "--agent", "ref@dev", "--json", token=bob)
        assert result.code == 0, result.err
        assert result.json["workspace"] == "bob" and result.json["driver"] == "server"
        theirs = cli("run", "--resume", str(result.json["id"]), token=carol)
        assert theirs.code == 1 and "[personal-owner-writes]" in theirs.err
        missing = cli("run", "finance@nowhere", "--agent", "ref@dev", token=bob)
        assert missing.code == 1 and "no workspace named 'nowhere'" in missing.err
        no_agent = cli("run", "finance@dev", "--agent", "ghost@dev", token=bob)
        assert no_agent.code == 1 and "ghost" in no_agent.err


def test_run_by_suite_name_syncs_it_first(engine, dev, cli, tmp_path):
    """`evalkit run NAME`, NAME a suite under evalkit.yaml's cases_dir, syncs it first like a
    path: a case the branch deleted is not run. NAME@WORKSPACE is never synced."""
    repo = Repo(tmp_path / "project")
    three = {"n1": ("What is 1 + 1?", "2"), "n2": ("What is 2 + 2?", "4")}
    write_suite(repo, "named", {**three, "n3": ("What is 3 + 3?", "6")})
    cli.monkeypatch.chdir(repo.root)
    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        first = cli("run", "named", "--agent", "ref@dev", "--json")
        assert first.code == 0, first.err
        assert "named is the suite" in first.err and "syncing it first" in first.err
        assert first.json["dataset"] == "named@admin" and first.json["runs"] == 3
        (repo.suite("named") / "n3.yaml").unlink()  # the current branch deleted a case
        second = cli("run", "named", "--agent", "ref@dev", "--json")
        assert second.code == 0, second.err
        assert sorted(r["case_id"] for r in second.json["run_list"]) == ["n1", "n2"]
        shared = cli("run", "named", "--workspace", "dev", "--agent", "ref@dev", "--json")
        assert shared.code == 0, shared.err
        assert shared.json["dataset"] == "named@dev" and shared.json["runs"] == 2
        (repo.suite("named") / "n2.yaml").unlink()
        as_is = cli("run", "named@dev", "--agent", "ref@dev", "--json")
        assert as_is.code == 0 and as_is.json["runs"] == 2  # not synced: n2 is still there
        cli.monkeypatch.chdir(tmp_path)  # no evalkit.yaml: the personal dataset as it stands
        stale = cli("run", "named", "--agent", "ref@dev", "--json")
        assert stale.code == 0 and stale.json["runs"] == 2
        assert "syncing it first" not in stale.err
        none = cli("run", "nothing", "--workspace", "dev", "--agent", "ref@dev")
        assert none.code == 2 and "'nothing' is none (nor a suite under" in none.err


def test_run_usage_errors(engine, dev, cli):
    assert cli("run", "finance@dev").code == 2
    both = cli("run", "finance@dev", "--agent", "x@dev", "--resume", "1")
    assert both.code == 2 and "--resume" in both.err
    reps = cli("run", "finance@dev", "--agent", "x@dev", "--repetitions", "0")
    assert reps.code == 2
    body = {"dataset": "finance@dev", "agent": "x@dev", "repetitions": 101}
    assert api(engine, dev, "POST", "/api/experiments", json=body).status_code == 400
    unknown = {"dataset": "finance@dev", "agent": "x@dev", "colour": "red"}
    bad = api(engine, dev, "POST", "/api/experiments", json=unknown)
    assert bad.status_code == 400 and "colour" in bad.json()["error"]["message"]


def test_a_hanging_poll_is_retried(engine, dev, cli):
    with harness(Behaviour(run_seconds=0.2, hang_first={"status": 1})) as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        result = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json")
        assert result.code == 0, result.err
        run = cli("runs", "show", str(result.json["run_list"][0]["id"]), "--json").json
        # The hung call counted as one failed attempt (worker.harness_timeout_seconds = 2).
        assert run["state"] == "done" and run["answer"] == "5"
        assert ref.counters.calls["status"] >= 2


def test_a_harness_that_lies_about_its_trajectory(engine, dev, cli):
    with harness(Behaviour(lie=True)) as ref:
        create_agent(engine, dev, "dev", "liar", ref.url)
        result = cli("run", "finance@dev", "--agent", "liar@dev", "--case-id", "add", "--json")
        run = cli("runs", "show", str(result.json["run_list"][0]["id"]), "--json").json
        assert run["state"] == "done" and run["answer"] == "5"
        assert run["trajectory_valid"] is False
        [error] = run["trajectory_errors"]
        assert error["rule"] == "not-collected" and "trajectory" in error["message"]


def test_the_sweeper_moves_a_run_no_job_would(engine, dev, cli):
    import asyncio

    import psycopg

    from evalkit.db import Database
    from evalkit.jobs.queue import defer

    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        done = cli("run", "finance@dev", "--agent", "ref@dev", "--case-id", "add", "--json").json
        run_id = done["run_list"][0]["id"]
        # As if a worker died right after claiming the run: starting, idle, no job.
        with psycopg.connect(engine.db_url, autocommit=True) as conn:
            conn.execute(UNGUARDED)
            conn.execute(
                "UPDATE runs SET state = 'starting', finished_at = NULL, "
                "updated_at = now() - interval '1 hour' WHERE id = %s",
                [run_id],
            )
            conn.execute("DELETE FROM trajectories WHERE run_id = %s", [run_id])
            conn.execute(
                "UPDATE experiments SET status = 'running', summary = NULL WHERE id = %s",
                [done["id"]],
            )

        async def sweep() -> None:
            db = Database(engine.db_url)
            await db.open()
            try:
                async with db.connection() as conn:
                    await defer(conn, "sweep_runs", timestamp=0)
            finally:
                await db.close()

        asyncio.run(sweep())
        detail = wait_finished(engine, dev, done["id"])
        assert detail["by_state"] == {"done": 1}
        # The second start carried the same evalkit_run_id: the harness did not run it twice.
        assert ref.counters.runs_created == 1 and ref.counters.starts[str(run_id)] == 2


def test_the_summary_counts_runs_not_states(engine, dev, cli):
    """summary.runs is the experiment's number of runs, whatever states they ended in."""
    import asyncio

    from evalkit.db import Database
    from evalkit.store.runs import finish_experiment_if_done

    with harness() as ref:
        create_agent(engine, dev, "dev", "ref", ref.url)
        done = cli("run", "finance@dev", "--agent", "ref@dev", "--repetitions", "2", "--json")
        assert done.code == 0, done.err
    experiment = done.json["id"]
    detail = wait_finished(engine, dev, experiment)
    assert detail["summary"]["runs"] == 6 and detail["summary"]["by_state"] == {"done": 6}

    async def fail_two_and_finish() -> bool:
        # One transaction: the server's sweeper, which closes an open experiment without live
        # runs, cannot see the reopened experiment and close it before this call does.
        db = Database(engine.db_url)
        await db.open()
        try:
            async with db.transaction() as conn:
                await conn.raw.execute(UNGUARDED)
                await conn.raw.execute(
                    "UPDATE runs SET state = 'failed' WHERE id IN (SELECT id FROM runs "
                    "WHERE experiment_id = %s ORDER BY id LIMIT 2)",
                    [experiment],
                )
                await conn.raw.execute(
                    "UPDATE experiments SET status = 'running', summary = NULL WHERE id = %s",
                    [experiment],
                )
                return await finish_experiment_if_done(conn, experiment)
        finally:
            await db.close()

    assert asyncio.run(fail_two_and_finish()) is True
    summary = wait_finished(engine, dev, experiment)["summary"]
    assert summary["runs"] == 6 and summary["by_state"] == {"done": 4, "failed": 2}
