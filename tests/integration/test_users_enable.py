"""Enabling a disabled user again: through the real CLI and the API, admins only, audited;
the user logs in again while the tokens revoked when they were disabled stay revoked."""

from __future__ import annotations

import httpx

from tests.integration.datasets_helpers import add_user, login


def _whoami(server, token: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/auth/whoami", headers={"Authorization": f"Bearer {token}"})


def test_enable_lets_a_disabled_user_log_in_again(cli, server, admin_token, api_login):
    login(cli, server)
    old = add_user(server, admin_token, "alice")
    assert cli("users", "disable", "alice").code == 0
    assert _whoami(server, old).json()["error"]["code"] == "token-revoked"
    refused = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "alice", "password": "alice-password"}
    )
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "user-disabled"

    enabled = cli("users", "enable", "alice")
    assert enabled.code == 0, enabled.err
    assert enabled.out.strip() == (
        "enabled alice; they can log in again (their old tokens stay revoked)"
    )
    listed = {u["username"]: u["disabled"] for u in cli("users", "list", "--json").json}
    assert listed == {"admin": False, "alice": False}

    new = api_login("alice", "alice-password")
    assert _whoami(server, new).json()["user"]["username"] == "alice"
    # The token from before the disable was revoked with it, and stays so.
    stale = _whoami(server, old)
    assert stale.status_code == 401 and stale.json()["error"]["code"] == "token-revoked"
    # and her CLI works again with the new login.
    assert cli("whoami", "--json", token=new).json["user"]["username"] == "alice"

    # Enabling an enabled user changes nothing and is fine; --json gives the user.
    again = cli("users", "enable", "alice", "--json")
    assert again.code == 0 and again.json["username"] == "alice"
    assert again.json["disabled"] is False

    entries = cli("audit", "--action", "user.enable", "--json").json
    assert [(e["actor"], e["action"], e["target"]) for e in entries] == [
        ("admin", "user.enable", "alice"),
        ("admin", "user.enable", "alice"),
    ]


def test_enable_refuses_an_unknown_user_and_leaves_no_audit_row(cli, server):
    login(cli, server)
    ghost = cli("users", "enable", "ghost")
    assert ghost.code == 1
    assert "no user named 'ghost'; see `evalkit users list` [no-such-user]" in ghost.err
    assert cli("audit", "--action", "user.enable", "--json").json == []


def test_enable_is_for_admins_only(cli, server, admin_token):
    login(cli, server)
    bob = add_user(server, admin_token, "bob")
    add_user(server, admin_token, "alice")
    assert cli("users", "disable", "alice").code == 0

    refused = cli("users", "enable", "alice", token=bob)
    assert refused.code == 1
    assert "bob is not an admin and cannot enable users" in refused.err
    assert "[admin-only]" in refused.err

    r = httpx.post(
        f"{server.url}/api/users/alice/enable", headers={"Authorization": f"Bearer {bob}"}
    )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "admin-only"
    assert r.json()["error"]["message"].startswith("bob is not an admin and cannot enable users")
    # Still disabled, and no row in the audit log for the refused calls.
    assert {u["username"]: u["disabled"] for u in cli("users", "list", "--json").json}["alice"]
    assert cli("audit", "--action", "user.enable", "--json").json == []


def test_enable_through_the_api(server, admin_token):
    add_user(server, admin_token, "alice")
    auth = {"Authorization": f"Bearer {admin_token}"}
    assert httpx.post(f"{server.url}/api/users/alice/disable", headers=auth).status_code == 200
    r = httpx.post(f"{server.url}/api/users/alice/enable", headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["username"] == "alice" and r.json()["disabled"] is False
    missing = httpx.post(f"{server.url}/api/users/ghost/enable", headers=auth)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "no-such-user"
    entries = httpx.get(f"{server.url}/api/audit?action=user.enable", headers=auth).json()
    assert [(e["actor"], e["target"], e["detail"]) for e in entries] == [("admin", "alice", {})]
