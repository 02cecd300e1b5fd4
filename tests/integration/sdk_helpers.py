"""Helpers for the SDK tests: a server with a worker, a user logged in the way the SDK
finds a login (environment), a developer repo with evalkit.yaml, a code-driven agent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from evalkit.otel.mapping import load_starter
from tests.conftest import ADMIN_PASSWORD
from tests.integration.datasets_helpers import Repo, admin_api
from tests.integration.runs_helpers import engine_server, login_token

CASES = {
    "add": ("What is 2 + 3?", "5"),
    "mul": ("What is 6 * 7?", "42"),
    "sub": ("What is 10 - 4?", "6"),
}


def case_text(question: str, answer: str, *, custom: str = "", tags: str = "[math]") -> str:
    text = (
        f"input:\n  question: {question!r}\nexpected:\n  answer: {answer!r}\n"
        f"tags: {tags}\nsplit: test\nevaluators:\n  exact_match: true\n"
    )
    if custom:
        text += "  custom:\n" + "".join(f"    {line}\n" for line in custom.splitlines())
    return text


@dataclass
class Dev:
    """alice, logged in through the environment, in her repo (the working directory)."""

    server: object
    token: str
    admin: str
    repo: Repo

    def api(self, method: str, path: str, **kw) -> httpx.Response:
        return httpx.request(
            method,
            self.server.url + path,  # type: ignore[attr-defined]
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
            **kw,
        )

    def suite(self, name: str = "finance", cases: dict | None = None, custom: str = "") -> Path:
        for case_id, (question, answer) in (cases or CASES).items():
            self.repo.case(name, case_id, case_text(question, answer, custom=custom))
        return self.repo.suite(name)

    def agent(self, name: str = "mine", **settings) -> dict:
        body = {"name": name, "mapping": load_starter("openinference"), **settings}
        r = self.api("POST", "/api/workspaces/alice/agents", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def run(self, run_id: int, trajectory: bool = False) -> dict:
        suffix = "?trajectory=1" if trajectory else ""
        r = self.api("GET", f"/api/runs/{run_id}{suffix}")
        assert r.status_code == 200, r.text
        return r.json()

    def scores(self, run_id: int) -> dict[str, dict]:
        r = self.api("GET", f"/api/runs/{run_id}/scores")
        assert r.status_code == 200, r.text
        return {s["name"]: s for s in r.json()}


@pytest.fixture
def engine(database_url, tmp_path):
    def quick(settings) -> None:
        settings.otel.settle_seconds = 0.3

    running = engine_server(database_url, tmp_path, extra=quick)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def dev(engine, monkeypatch, tmp_path) -> Dev:
    admin = login_token(engine, "admin", ADMIN_PASSWORD)
    admin_api(
        engine, admin, "POST", "/api/users", json={"username": "alice", "password": "alice-pw"}
    )
    token = login_token(engine, "alice", "alice-pw")
    monkeypatch.setenv("EVALKIT_CLI_CONFIG_DIR", str(tmp_path / "cli-config"))
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
    monkeypatch.setenv("EVALKIT_TOKEN", token)
    monkeypatch.delenv("EVALKIT_OTEL_TOKEN", raising=False)
    repo = Repo(tmp_path / "repo")
    monkeypatch.chdir(repo.root)
    return Dev(engine, token, admin, repo)
