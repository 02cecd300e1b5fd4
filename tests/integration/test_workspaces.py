"""Shared workspaces, members and promotion links through the real CLI."""

from __future__ import annotations

import pytest


@pytest.fixture
def as_admin(cli, server, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    cli.monkeypatch.setenv("EVALKIT_TOKEN", admin_token)
    return cli


def test_create_list_show(as_admin):
    cli = as_admin
    assert cli("workspaces", "create", "dev").code == 0
    dup = cli("workspaces", "create", "dev")
    assert dup.code == 1 and "workspace 'dev' already exists [workspace-exists]" in dup.err
    bad = cli("workspaces", "create", "Dev Team")
    assert bad.code == 1 and "[bad-name]" in bad.err
    listed = cli("workspaces", "list", "--json").json
    assert [(w["name"], w["kind"]) for w in listed] == [("dev", "shared"), ("admin", "personal")]
    shown = cli("workspaces", "show", "dev", "--json").json
    assert shown["writable"] is True and shown["owner"] is None
    missing = cli("workspaces", "show", "nope")
    assert missing.code == 1 and "no workspace named 'nope'" in missing.err


def test_members_add_change_list_remove(as_admin):
    cli = as_admin
    cli("workspaces", "create", "dev")
    cli("users", "add", "alice")
    added = cli("workspaces", "members", "add", "dev", "alice", "--role", "writer")
    assert added.code == 0 and added.out.strip() == "alice is writer of @dev"
    changed = cli("workspaces", "members", "add", "dev", "alice", "--role", "reviewer")
    assert changed.out.strip() == "alice is now reviewer of @dev (was writer)"
    members = cli("workspaces", "members", "list", "dev", "--json").json
    assert members == [{"username": "alice", "role": "reviewer", "disabled": False}]
    assert cli("workspaces", "members", "remove", "dev", "alice").code == 0
    again = cli("workspaces", "members", "remove", "dev", "alice")
    assert again.code == 1 and "alice is not a member of @dev" in again.err
    assert cli("workspaces", "members", "list", "dev", "--json").json == []


def test_member_bad_input(as_admin):
    cli = as_admin
    cli("workspaces", "create", "dev")
    role = cli("workspaces", "members", "add", "dev", "admin", "--role", "owner")
    assert role.code == 2 and 'Invalid value "owner" for --role' in role.err
    ghost = cli("workspaces", "members", "add", "dev", "ghost", "--role", "writer")
    assert ghost.code == 1 and "no user named 'ghost'" in ghost.err
    personal = cli("workspaces", "members", "add", "admin", "admin", "--role", "writer")
    assert personal.code == 1 and "@admin is a personal workspace" in personal.err


def test_role_is_validated_by_the_api_too(server, admin_token):
    import httpx

    r = httpx.post(
        f"{server.url}/api/workspaces",
        json={"name": "dev"},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert r.status_code == 201
    r = httpx.post(
        f"{server.url}/api/workspaces/dev/members",
        json={"username": "admin", "role": "owner"},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "bad-body"
    assert "`$.role`" in r.json()["error"]["message"]


def test_promotion_links(as_admin):
    cli = as_admin
    for name in ("dev", "prod", "staging"):
        cli("workspaces", "create", name)
    linked = cli("workspaces", "promote-to", "dev", "prod")
    assert linked.code == 0 and linked.out.strip() == "approvals in @dev now promote to @prod"
    assert cli("workspaces", "promote-to", "dev", "prod").code == 0, "repeating a link is fine"

    second_target = cli("workspaces", "promote-to", "dev", "staging")
    assert second_target.code == 1
    assert "@dev already promotes to @prod; a source has one target" in second_target.err
    second_source = cli("workspaces", "promote-to", "staging", "prod")
    assert second_source.code == 1
    assert "@prod is already fed by @dev; a target has one source" in second_source.err
    chain = cli("workspaces", "promote-to", "prod", "staging")
    assert chain.code == 1 and "[promotion-chain]" in chain.err
    self_link = cli("workspaces", "promote-to", "staging", "staging")
    assert self_link.code == 1 and "cannot promote to itself" in self_link.err
    personal = cli("workspaces", "promote-to", "staging", "admin")
    assert personal.code == 1 and "personal workspace" in personal.err

    prod = cli("workspaces", "show", "prod", "--json").json
    assert prod["promoted_from"] == "dev"
    assert "fed by approvals in @dev" in cli("workspaces", "show", "prod").out
    rows = cli("workspaces", "list").out
    assert "-> @prod" in rows and "<- @dev" in rows


def test_writer_sees_write_access_reader_does_not(as_admin, api_login):
    cli = as_admin
    cli("workspaces", "create", "dev")
    cli("users", "add", "alice", "--password-stdin", stdin="alice-password\n")
    cli("users", "add", "bob", "--password-stdin", stdin="bob-password\n")
    cli("workspaces", "members", "add", "dev", "alice", "--role", "writer")
    alice = api_login("alice", "alice-password")
    bob = api_login("bob", "bob-password")
    cli.monkeypatch.delenv("EVALKIT_TOKEN")
    by_alice = {w["name"]: w for w in cli("workspaces", "list", "--json", token=alice).json}
    by_bob = {w["name"]: w for w in cli("workspaces", "list", "--json", token=bob).json}
    assert by_alice["dev"]["writable"] and by_alice["dev"]["your_role"] == "writer"
    assert not by_bob["dev"]["writable"] and by_bob["dev"]["your_role"] is None
    assert not by_bob["alice"]["writable"], "someone else's personal workspace is read-only"
    assert by_bob["bob"]["writable"]
    whoami = cli("whoami", "--json", token=alice).json
    assert whoami["memberships"] == [{"workspace": "dev", "role": "writer"}]
