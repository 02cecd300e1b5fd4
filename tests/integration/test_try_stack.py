"""try/: the try-it stack's local path run as try/README.md says, for real: `evalkit
init-server` on a PostgreSQL (the test cluster, as "a local PostgreSQL of yours"), `evalkit
server --with-worker` from the config it wrote, and `sh try/run.sh` with an LLM judge on
loopback (OpenAI-compatible, with a key). The sample agent's SDK run ends with every run
done, its trajectories built from its spans, and the judge's score on each run. A second
`run.sh` reuses the judge and the agent. Its compose file is checked in
tests/unit/test_try_compose.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.integration.judge_helpers import JudgeBehaviour, JudgeServer
from tests.integration.test_server_process import EVALKIT, env, wait_ready

ROOT = Path(__file__).parents[2]
RUN_SH = ROOT / "try" / "run.sh"
PASSWORD = "try-evalkit"
JUDGE_KEY = "sk-try-judge"


@pytest.fixture
def try_server(new_database, tmp_path) -> Iterator[str]:
    """README way (a): init-server on an empty database, then the server from its config."""
    config = tmp_path / "try-server.yaml"
    init = subprocess.run(
        [
            EVALKIT,
            "init-server",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "try-data"),
            "--database-url",
            new_database(template=False),
            "--admin-password-env",
            "EVALKIT_ADMIN_PASSWORD",
        ],
        env=env(EVALKIT_ADMIN_PASSWORD=PASSWORD),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert init.returncode == 0, init.stderr
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_env = env(EVALKIT_EGRESS_ALLOW_PRIVATE="true", EVALKIT_OTEL_SETTLE_SECONDS="1")
    command = [EVALKIT, "server", "--config", str(config), "--with-worker", "--port", str(port)]
    proc = subprocess.Popen(
        command, env=server_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.fixture
def judge() -> Iterator[JudgeServer]:
    server = JudgeServer(JudgeBehaviour(api_key=JUDGE_KEY)).start()
    try:
        yield server
    finally:
        server.stop()


def run_sh(server_url: str, judge: JudgeServer, tmp_path: Path) -> subprocess.CompletedProcess:
    """`sh try/run.sh` as the README's second terminal runs it, in a checkout with
    `uv run`: this project's evalkit and python3 first on PATH, a HOME of its own."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    extra = {
        "HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "EVALKIT_SERVER_URL": server_url,
        "EVALKIT_PASSWORD": PASSWORD,
        "EVALKIT_TRY_JUDGE_BASE_URL": judge.base_url,
        "EVALKIT_TRY_JUDGE_MODEL": "judge-model",
        "EVALKIT_TRY_JUDGE_API_KEY": JUDGE_KEY,
        "EVALKIT_TRY_WORKDIR": str(tmp_path / "sample"),
    }
    return subprocess.run(
        ["sh", str(RUN_SH)],
        env=env(**extra),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )


def admin(server_url: str) -> httpx.Client:
    client = httpx.Client(base_url=server_url, timeout=30)
    login = client.post("/api/auth/login", json={"username": "admin", "password": PASSWORD})
    assert login.status_code == 200, login.text
    client.headers["Authorization"] = f"Bearer {login.json()['token']}"
    return client


def test_the_local_path_runs_the_sample_agent_with_your_judge(try_server, judge, tmp_path):
    first = run_sh(try_server, judge, tmp_path)
    assert first.returncode == 0, f"{first.stdout}\n{first.stderr}"
    assert "experiment" in first.stdout and "(finished): 4 done" in first.stdout, first.stdout
    api = admin(try_server)
    (experiment,) = api.get("/api/experiments", params={"workspace": "admin"}).json()
    assert experiment["agent"].startswith("sample-agent"), experiment
    scores = api.get(f"/api/experiments/{experiment['id']}/scores").json()["scores"]
    by_name = {s["name"]: s for s in scores}
    assert by_name["judge"]["readings"] == 4, by_name["judge"]
    # Trajectories from the spans: the two sums the calculator computed show its tool call.
    assert by_name["tool_calls"]["passes"] == by_name["tool_calls"]["readings"] == 2
    assert (by_name["exact_match"]["passes"], by_name["exact_match"]["readings"]) == (3, 4)
    # The server's judge is yours, keyed; the SDK sent the key it read through evalkit.yaml.
    default = api.get("/api/judge-default").json()
    assert default["provider"] == "try-judge" and default["model"] == "judge-model", default
    assert judge.requests and all(
        r["headers"]["authorization"] == f"Bearer {JUDGE_KEY}" for r in judge.requests
    )
    written = (tmp_path / "sample" / "evalkit.yaml").read_text()
    assert f"{judge.base_url}: {{api_key_env: EVALKIT_TRY_JUDGE_API_KEY}}" in written
    assert JUDGE_KEY not in written

    again = run_sh(try_server, judge, tmp_path / "again")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    items = api.get("/api/experiments", params={"workspace": "admin"}).json()
    assert len(items) == 2


def test_run_sh_names_what_is_missing(tmp_path):
    done = subprocess.run(
        ["sh", str(RUN_SH)],
        env=env(EVALKIT_SERVER_URL="http://127.0.0.1:9", EVALKIT_PASSWORD=PASSWORD),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "set EVALKIT_TRY_JUDGE_BASE_URL (your LLM's OpenAI-compatible base URL" in done.stderr
