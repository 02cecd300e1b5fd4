"""Helpers for the run engine tests: a server with a worker, a reference harness, a suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx

from evalkit.config import Settings
from evalkit.harness.reference import Behaviour, ReferenceHarness
from tests.conftest import start_server
from tests.integration.datasets_helpers import Repo, admin_api


def fast_engine(settings: Settings) -> None:
    """Loopback harnesses allowed; short timeouts and backoff so faults show quickly."""
    settings.egress.allow_private = True
    settings.worker.concurrency = 8
    settings.worker.harness_timeout_seconds = 2.0
    settings.worker.harness_attempts = 3
    settings.worker.retry_backoff_seconds = 0.05
    settings.worker.stalled_seconds = 2.0


def engine_server(database_url: str, tmp_path: Path, *, worker: bool = True, extra=None):
    def configure(settings: Settings) -> None:
        fast_engine(settings)
        if extra is not None:
            extra(settings)

    return start_server(database_url, tmp_path, worker=worker, configure=configure)


ARITHMETIC = {
    "add": ("What is 2 + 3?", "5"),
    "mul": ("What is 6 * 7?", "42"),
    "sub": ("What is 10 - 4?", "6"),
}


def write_suite(repo: Repo, name: str = "finance", cases: dict | None = None) -> Path:
    for case_id, (question, answer) in (cases or ARITHMETIC).items():
        repo.case(
            name,
            case_id,
            f"input:\n  question: {question!r}\nexpected:\n  answer: {answer!r}\n"
            "tags: [math]\nsplit: test\n",
        )
    return repo.suite(name)


def create_agent(server, token: str, workspace: str, name: str, url: str, **settings) -> dict:
    body = {"name": name, "harness_url": url, "poll_interval": 0.05, **settings}
    r = admin_api(server, token, "POST", f"/api/workspaces/{workspace}/agents", json=body)
    return r.json()


def api(server, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(
        method, server.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw
    )


def login_token(server, username: str, password: str) -> str:
    r = httpx.post(
        f"{server.url}/api/auth/login", json={"username": username, "password": password}
    )
    assert r.status_code == 200, r.text
    return r.json()["token"]


def wait_finished(server, token: str, experiment_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        detail = api(server, token, "GET", f"/api/experiments/{experiment_id}").json()
        if detail["status"] == "finished":
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"experiment {experiment_id} did not finish: {detail}")
        time.sleep(0.1)


def harness(behaviour: Behaviour | None = None, **kw) -> ReferenceHarness:
    return ReferenceHarness(behaviour, **kw).start()


def until(predicate: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


UNGUARDED = "SET session_replication_role = replica"
"""Turns the database's run transition guard off for the connection (its triggers do not
fire), so a test can put a run where only a crash would leave it."""
