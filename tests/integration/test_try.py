"""`evalkit try --exit`: the README's first command, run as a user runs it (a subprocess on
a fresh data dir, its own embedded PostgreSQL), twice: the second run reuses the first's
server data and logs in with the kept password."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from evalkit.serve import free_port
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer

EVALKIT = str(Path(sys.executable).parent / "evalkit")
EXPECTED_SCORES = {"contains", "exact_match", "latency", "numeric", "steps", "tool_calls"}


def run_try(data_dir: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    return subprocess.run(
        [EVALKIT, "try", "--exit", "--data-dir", str(data_dir), "--port", str(port), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_try_runs_both_agents_end_to_end_then_again_on_the_same_data(tmp_path):
    port = free_port()
    first = run_try(tmp_path / "try", port, "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["url"] == f"http://127.0.0.1:{port}"
    assert out["judged"] is False
    assert len(out["admin_password"]) >= 12
    assert set(out["experiments"]) == {"calculator", "traced-calculator"}
    for agent, experiment in out["experiments"].items():
        assert experiment["by_state"] == {"done": 4}, (agent, experiment)
        scores = {s["name"]: s for s in experiment["scores"]["scores"]}
        assert set(scores) == EXPECTED_SCORES, agent
        # The sample agent echoes the one question without arithmetic: 3 of 4 exact.
        assert (scores["exact_match"]["passes"], scores["exact_match"]["readings"]) == (3, 4)
        assert scores["tool_calls"]["passes"] == scores["tool_calls"]["readings"] == 2
    assert "server up at" in first.stderr and "synced the sample suite" in first.stderr
    kept = (tmp_path / "try" / "try-admin-password").read_text().strip()
    assert kept == out["admin_password"]
    assert (tmp_path / "try" / "try-admin-password").stat().st_mode & 0o077 == 0

    second = run_try(tmp_path / "try", port)
    assert second.returncode == 0, second.stderr
    # New experiments (ids only grow; a restarted database may skip some), every run done.
    first_ids = {e["id"] for e in out["experiments"].values()}
    for agent in ("calculator", "traced-calculator"):
        found = re.search(rf"experiment (\d+) \({agent}\): 4 done", second.stdout)
        assert found, second.stdout
        assert int(found[1]) > max(first_ids)
    assert "exact_match  evaluator  0.750" in second.stdout
    assert "admin password" not in second.stdout  # shown once, on the first run
    assert f"web UI: http://127.0.0.1:{port}" in second.stdout
    # --exit means exit: nothing listens any more.
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        raise AssertionError("the demo server still answers after --exit")
    except httpx.TransportError:
        pass


def test_try_refuses_a_half_configured_judge(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env["EVALKIT_TRY_JUDGE_MODEL"] = "gpt-4o-mini"
    r = subprocess.run(
        [EVALKIT, "try", "--exit", "--data-dir", str(tmp_path / "d"), "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert "EVALKIT_TRY_JUDGE_BASE_URL" in r.stderr
    assert not (tmp_path / "d").exists()  # refused before touching anything


def test_try_grades_with_the_llm_judge_named_by_the_environment(tmp_path):
    with JudgeServer(JudgeBehaviour(api_key="sk-try-secret")) as judge:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
        env |= {
            "EVALKIT_TRY_JUDGE_BASE_URL": judge.base_url,
            "EVALKIT_TRY_JUDGE_MODEL": "judge-model-1",
            "EVALKIT_TRY_JUDGE_API_KEY": "sk-try-secret",
        }
        r = subprocess.run(
            [
                EVALKIT,
                "try",
                "--exit",
                "--json",
                "--data-dir",
                str(tmp_path / "d"),
                "--port",
                str(free_port()),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["judged"] is True
        for agent, experiment in out["experiments"].items():
            scores = {s["name"]: s for s in experiment["scores"]["scores"]}
            assert scores["judge"]["readings"] == 4, (agent, scores.get("judge"))
        # One grading per run of both experiments, each with the key and the model.
        assert len(judge.requests) == 8
        assert {q["body"]["model"] for q in judge.requests} == {"judge-model-1"}
        assert {q["headers"]["authorization"] for q in judge.requests} == {"Bearer sk-try-secret"}
    assert "sk-try-secret" not in r.stdout + r.stderr
