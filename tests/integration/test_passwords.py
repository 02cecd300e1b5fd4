"""Passwords (change your own, an admin's reset), login limits, and the audit log, through
the real CLI and API."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import ADMIN_PASSWORD


@pytest.fixture
def as_admin(cli, server, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", admin_token)
    return cli


def login(server, username: str, password: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/auth/login", json={"username": username, "password": password}
    )


def whoami(server, token: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/auth/whoami", headers={"Authorization": f"Bearer {token}"})


def test_change_own_password(as_admin, server, api_login):
    cli = as_admin
    cli("users", "add", "alice", "--password-stdin", stdin="alice-pass-1\n")
    laptop = api_login("alice", "alice-pass-1")
    desktop = api_login("alice", "alice-pass-1")
    wrong = cli("users", "password", "--password-stdin", stdin="nope\nalice-pass-2\n", token=laptop)
    assert wrong.code == 1 and "the old password is wrong [bad-credentials]" in wrong.err
    short = cli(
        "users", "password", "--password-stdin", stdin="alice-pass-1\nshort\n", token=laptop
    )
    assert short.code == 1 and "[password-too-short]" in short.err
    changed = cli(
        "users", "password", "--password-stdin", "--json", stdin="alice-pass-1\nalice-pass-2\n",
        token=laptop,
    )  # fmt: skip
    assert changed.code == 0, changed.err
    assert changed.json == {"username": "alice", "other_tokens_revoked": 1}
    assert whoami(server, laptop).status_code == 200  # the token that changed it still works
    gone = whoami(server, desktop)
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "token-revoked"
    assert login(server, "alice", "alice-pass-1").status_code == 401
    assert login(server, "alice", "alice-pass-2").status_code == 200


def test_admin_resets_a_password(as_admin, server, api_login, admin_token):
    cli = as_admin
    cli("users", "add", "alice", "--password-stdin", stdin="alice-pass-1\n")
    alice = api_login("alice", "alice-pass-1")
    refused = cli("users", "reset", "admin", token=alice)
    assert refused.code == 1 and "alice is not an admin and cannot reset passwords" in refused.err
    cli.monkeypatch.setenv("EVALKIT_TOKEN", admin_token)  # token= above unset it
    reset = cli("users", "reset", "alice", "--json")
    assert reset.code == 0, reset.err
    new_password = reset.json["generated_password"]
    assert reset.json["username"] == "alice" and reset.json["tokens_revoked"] == 1
    assert whoami(server, alice).json()["error"]["code"] == "token-revoked"
    assert login(server, "alice", "alice-pass-1").status_code == 401
    assert login(server, "alice", new_password).status_code == 200
    text = cli("users", "reset", "alice")
    assert text.out.startswith("new password for alice: ") and "shown only once" in text.err
    missing = cli("users", "reset", "nobody")
    assert missing.code == 1 and "no user named 'nobody'" in missing.err


def test_sso_only_user_has_no_password_to_change(as_admin, server):
    cli = as_admin
    added = cli("users", "add", "ci-bot", "--subject", "ci-sub", "--json")
    assert added.code == 0 and added.json["generated_password"] is None
    # No password: a password login fails like a wrong one.
    assert login(server, "ci-bot", "anything-at-all").status_code == 401
    taken = cli("users", "add", "other-bot", "--subject", "ci-sub")
    assert taken.code == 1 and "[subject-taken]" in taken.err


def test_login_backoff_per_user(server):
    for _ in range(5):  # the free allowance
        r = login(server, "admin", "wrong-password")
        assert r.status_code == 401 and r.json()["error"]["code"] == "bad-credentials"
    blocked = login(server, "admin", ADMIN_PASSWORD)  # even the right password waits
    assert blocked.status_code == 429, blocked.text
    assert blocked.headers["retry-after"] == "1"
    error = blocked.json()["error"]
    assert error["code"] == "too-many-attempts"
    assert "too many failed logins for user 'admin'; try again in 1 second" in error["message"]
    time.sleep(1.1)
    assert login(server, "admin", "wrong-password").status_code == 401  # the sixth failure
    doubled = login(server, "admin", ADMIN_PASSWORD)
    assert doubled.status_code == 429 and doubled.headers["retry-after"] == "2"
    time.sleep(2.1)
    assert login(server, "admin", ADMIN_PASSWORD).status_code == 200
    # The success cleared the user's count: the next failure is an ordinary 401 again.
    assert login(server, "admin", "wrong-password").status_code == 401
    assert login(server, "admin", ADMIN_PASSWORD).status_code == 200


def test_login_backoff_per_address(server):
    for i in range(20):  # many usernames from one address
        assert login(server, f"guess{i}", "wrong-password").status_code == 401
    blocked = login(server, "admin", ADMIN_PASSWORD)
    assert blocked.status_code == 429 and blocked.headers["retry-after"] == "1"
    assert "for address 127.0.0.1" in blocked.json()["error"]["message"]


def test_web_login_form_shows_the_wait(server):
    with httpx.Client(base_url=server.url) as browser:
        for _ in range(5):
            r = browser.post("/login", data={"username": "admin", "password": "x", "next": "/"})
            assert r.status_code == 401
        r = browser.post("/login", data={"username": "admin", "password": "x", "next": "/"})
        assert r.status_code == 429 and "try again in" in r.text


def test_audit_log_records_admin_actions(as_admin, server, api_login):
    cli = as_admin
    steps = [
        ("users", "add", "alice"),
        ("users", "add", "ci-bot", "--subject", "ci-sub"),
        ("users", "bind", "alice", "--subject", "alice-sub"),
        ("users", "reset", "alice"),
        ("workspaces", "create", "dev"),
        ("workspaces", "create", "prod"),
        ("workspaces", "members", "add", "dev", "alice", "--role", "writer"),
        ("workspaces", "members", "remove", "dev", "alice"),
        ("workspaces", "promote-to", "dev", "prod"),
        ("llm-providers", "create", "openai", "--base-url", "http://203.0.113.10:8700/v1"),
        ("judge-default", "set", "--provider", "openai", "--model", "gpt-5"),
        ("judge-default", "clear"),
        ("llm-providers", "delete", "openai"),
        ("users", "disable", "alice"),
    ]
    for step in steps:
        result = cli(*step)
        assert result.code == 0, (step, result.err)
    # A refused action leaves no row: its transaction rolled back with it.
    assert cli("users", "add", "ci-bot").code == 1
    entries = cli("audit", "--json", "--limit", "100").json
    got = [(e["actor"], e["action"], e["target"]) for e in reversed(entries)]
    assert got == [
        ("admin", "user.add", "alice"),
        ("admin", "user.add", "ci-bot"),
        ("admin", "user.bind_subject", "alice"),
        ("admin", "user.reset_password", "alice"),
        ("admin", "workspace.create", "dev"),
        ("admin", "workspace.create", "prod"),
        ("admin", "member.add", "dev"),
        ("admin", "member.remove", "dev"),
        ("admin", "promotion.set", "dev"),
        ("admin", "provider.create", "openai"),
        ("admin", "judge.set_default", "openai"),
        ("admin", "judge.clear_default", "default judge"),
        ("admin", "provider.delete", "openai"),
        ("admin", "user.disable", "alice"),
    ]
    details = {e["action"]: e["detail"] for e in entries}
    assert details["member.add"] == {"user": "alice", "role": "writer"}
    assert details["user.add"] == {"subject": None}  # the first user.add: alice
    assert details["promotion.set"] == {"promotes_to": "prod"}
    assert details["judge.set_default"] == {"model": "gpt-5"}
    # Newest first, filtered, limited; the table form names who did what.
    only = cli("audit", "--action", "workspace.create", "--limit", "1", "--json").json
    assert [e["target"] for e in only] == ["prod"]
    table = cli("audit", "--limit", "3").out
    assert "user.disable" in table and "provider.delete" in table and "admin" in table
    bad = cli("audit", "--action", "user.eat")
    assert bad.code == 1 and "no audit action 'user.eat'" in bad.err
    # Admins only.
    cli("users", "add", "bob", "--password-stdin", stdin="bob-pass-12\n")
    bob = api_login("bob", "bob-pass-12")
    refused = cli("audit", token=bob)
    assert refused.code == 1 and "[admin-only]" in refused.err


def test_reset_ends_a_lockout(as_admin, server):
    cli = as_admin
    cli("users", "add", "alice", "--password-stdin", stdin="alice-pass-1\n")
    for _ in range(5):
        assert login(server, "alice", "wrong-password").status_code == 401
    assert login(server, "alice", "alice-pass-1").status_code == 429
    new_password = cli("users", "reset", "alice", "--json").json["generated_password"]
    assert login(server, "alice", new_password).status_code == 200
