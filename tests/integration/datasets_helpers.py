"""Helpers for the dataset tests: a developer repo with evalkit.yaml, suites and fixtures."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import ADMIN_PASSWORD


class Repo:
    """A developer repository: ``evalkit.yaml`` plus ``cases/<suite>/<case>.yaml``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.fixtures: dict[str, str] = {}
        self.max_fixture_bytes: int | None = None
        self.write_project()

    def write_project(self) -> None:
        lines = ["cases_dir: cases"]
        if self.max_fixture_bytes:
            lines.append(f"max_fixture_bytes: {self.max_fixture_bytes}")
        if self.fixtures:
            lines.append("fixtures:")
            lines += [f"  {key}: {path}" for key, path in self.fixtures.items()]
        (self.root / "evalkit.yaml").write_text("\n".join(lines) + "\n")

    def fixture(self, key: str, data: bytes, name: str | None = None) -> Path:
        path = self.root / "fixtures" / (name or f"{key}.bin")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.fixtures[key] = f"fixtures/{path.name}"
        self.write_project()
        return path

    def suite(self, name: str) -> Path:
        path = self.root / "cases" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def case(self, suite: str, case_id: str, text: str | None = None, **kw: str) -> Path:
        path = self.suite(suite) / f"{case_id}.yaml"
        path.write_text(text if text is not None else simple_case(**kw))
        return path


def simple_case(question: str = "What is 2+2?", answer: str = "4", files: str = "") -> str:
    body = f"input:\n  question: {question!r}\n"
    if files:
        body += f"  files: [{files}]\n"
    return body + f"expected:\n  answer: {answer!r}\nevaluators:\n  exact_match: true\n"


def login(cli, server, username: str = "admin", password: str = ADMIN_PASSWORD) -> None:
    result = cli(
        "login", server.url, "--username", username, "--password-stdin", stdin=password + "\n"
    )
    assert result.code == 0, result.err


def admin_api(server, admin_token: str, method: str, path: str, **kw) -> httpx.Response:
    r = httpx.request(
        method, server.url + path, headers={"Authorization": f"Bearer {admin_token}"}, **kw
    )
    assert r.status_code < 400, r.text
    return r


def add_user(
    server, admin_token: str, name: str, *, member_of: str | None = None, role: str = "writer"
) -> str:
    """A user with password ``<name>-password``; optionally a member of a shared workspace."""
    admin_api(
        server,
        admin_token,
        "POST",
        "/api/users",
        json={"username": name, "password": f"{name}-password"},
    )
    if member_of:
        admin_api(
            server,
            admin_token,
            "POST",
            f"/api/workspaces/{member_of}/members",
            json={"username": name, "role": role},
        )
    r = httpx.post(
        f"{server.url}/api/auth/login", json={"username": name, "password": f"{name}-password"}
    )
    return r.json()["token"]
