"""Login, tokens and user administration through the real CLI against a running edge."""

from __future__ import annotations

import stat

import psycopg

from tests.conftest import ADMIN_PASSWORD


def login_admin(cli, server) -> None:
    result = cli(
        "login", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD + "\n"
    )
    assert result.code == 0, result.err
    assert f"logged in to {server.url} as admin" in result.out


def test_login_whoami_logout(cli, server, tmp_path):
    login_admin(cli, server)
    creds = tmp_path / "cli-config" / "credentials.json"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert ADMIN_PASSWORD not in creds.read_text()

    me = cli("whoami", "--json")
    assert me.code == 0
    assert me.json["user"]["username"] == "admin"
    assert me.json["user"]["is_admin"] is True
    assert me.json["personal_workspace"] == "admin"

    out = cli("logout")
    assert out.code == 0 and "logged out" in out.out
    after = cli("whoami")
    assert after.code == 1
    assert "not logged in" in after.err


def test_logout_revokes_the_token_on_the_server(cli, server, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    assert cli("whoami", token=admin_token).code == 0
    import httpx

    r = httpx.post(
        f"{server.url}/api/auth/logout", headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert r.status_code == 204
    refused = cli("whoami", token=admin_token)
    assert refused.code == 1
    assert "revoked" in refused.err and "[token-revoked]" in refused.err


def test_login_password_from_env(cli, server, monkeypatch):
    monkeypatch.setenv("EVALKIT_PASSWORD", ADMIN_PASSWORD)
    result = cli("login", server.url, "--username", "admin")
    assert result.code == 0, result.err


def test_a_password_login_wins_over_machine_credentials(cli, server, monkeypatch):
    # Client credentials in the environment sign every command in by themselves, unless
    # the login names a user: then that user logs in with a password.
    monkeypatch.setenv("EVALKIT_OIDC_CLIENT_ID", "ci-bot")
    monkeypatch.setenv("EVALKIT_OIDC_CLIENT_SECRET", "not-used-here")
    result = cli(
        "login", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD + "\n"
    )
    assert result.code == 0, result.err
    assert f"logged in to {server.url} as admin" in result.out


def test_sso_asked_of_a_server_without_it_is_refused_with_the_fix(cli, server):
    for flag in ("--sso", "--device"):
        result = cli("login", server.url, flag, "--password-stdin", stdin="unused\n")
        assert result.code == 1, result.out
        assert f"{server.url} has no single sign-on; log in with a password (--username)" in (
            result.err
        )


def test_wrong_password_and_unknown_user(cli, server):
    wrong = cli("login", server.url, "--username", "admin", "--password-stdin", stdin="nope-nope\n")
    assert wrong.code == 1
    assert wrong.err.strip() == "evalkit: error: wrong username or password [bad-credentials]"
    unknown = cli(
        "login", server.url, "--username", "ghost", "--password-stdin", stdin="whatever1\n"
    )
    assert unknown.err == wrong.err


def test_login_without_username_in_a_script_is_refused(cli, server):
    result = cli("login", server.url)
    assert result.code == 1
    assert "--username" in result.err


def test_expired_token_is_refused_with_reason(cli, server, admin_token):
    with psycopg.connect(server.db_url, autocommit=True) as conn:
        conn.execute("UPDATE login_tokens SET expires_at = now() - interval '1 second'")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    result = cli("whoami", token=admin_token)
    assert result.code == 1
    assert "expired" in result.err and "evalkit login" in result.err


def test_token_ttl_comes_from_settings(cli, database_url, tmp_path):
    from tests.conftest import start_server

    running = start_server(database_url, tmp_path, token_ttl_hours=2)
    try:
        result = cli(
            "login",
            running.url,
            "--username",
            "admin",
            "--password-stdin",
            stdin=ADMIN_PASSWORD + "\n",
        )
        assert result.code == 0
        with psycopg.connect(database_url) as conn:
            (hours,) = conn.execute(
                "SELECT extract(epoch FROM expires_at - created_at) / 3600 FROM login_tokens"
            ).fetchone()
        assert round(float(hours), 3) == 2.0
    finally:
        running.stop()


def test_tokens_are_stored_hashed(server, admin_token):
    with psycopg.connect(server.db_url) as conn:
        stored = [bytes(r[0]) for r in conn.execute("SELECT token_hash FROM login_tokens")]
    assert stored and all(admin_token.encode() not in s for s in stored)
    assert all(len(s) == 32 for s in stored)


def test_users_add_generated_password_then_login(cli, server):
    login_admin(cli, server)
    added = cli("users", "add", "alice", "--json")
    assert added.code == 0, added.err
    password = added.json["generated_password"]
    assert len(password) >= 16
    assert added.json["personal_workspace"] == "alice"
    cli("logout")
    as_alice = cli(
        "login", server.url, "--username", "alice", "--password-stdin", stdin=password + "\n"
    )
    assert as_alice.code == 0
    ws = cli("workspaces", "show", "alice", "--json")
    assert ws.json["kind"] == "personal" and ws.json["owner"] == "alice" and ws.json["writable"]


def test_users_add_password_stdin_and_rules(cli, server):
    login_admin(cli, server)
    short = cli("users", "add", "bob", "--password-stdin", stdin="short\n")
    assert short.code == 1
    assert "5 characters long; use at least 8 [password-too-short]" in short.err
    long = cli("users", "add", "bob", "--password-stdin", stdin="é" * 37 + "\n")
    assert long.code == 1
    assert "74 bytes long; use at most 72 bytes [password-too-long]" in long.err
    ok = cli("users", "add", "bob", "--password-stdin", stdin="x" * 72 + "\n")
    assert ok.code == 0, ok.err
    dup = cli("users", "add", "bob")
    assert dup.code == 1
    assert "user 'bob' already exists [user-exists]" in dup.err
    bad = cli("users", "add", "Bob Smith")
    assert bad.code == 1 and "not a valid name" in bad.err and "[bad-name]" in bad.err


def test_username_clashing_with_shared_workspace(cli, server):
    login_admin(cli, server)
    assert cli("workspaces", "create", "dev").code == 0
    clash = cli("users", "add", "dev")
    assert clash.code == 1
    assert "a workspace named 'dev' already exists" in clash.err


def test_users_list_and_disable(cli, server):
    login_admin(cli, server)
    cli("users", "add", "carol", "--password-stdin", stdin="carol-password\n")
    listed = cli("users", "list", "--json")
    assert [u["username"] for u in listed.json] == ["admin", "carol"]
    table = cli("users", "list")
    assert table.out.splitlines()[0].split() == ["USER", "ADMIN", "DISABLED", "CREATED"]

    import httpx

    carol_token = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "carol", "password": "carol-password"}
    ).json()["token"]
    disabled = cli("users", "disable", "carol")
    assert disabled.code == 0
    assert cli("whoami", token=carol_token).code == 1
    relogin = cli(
        "login", server.url, "--username", "carol", "--password-stdin", stdin="carol-password\n"
    )
    assert relogin.code == 1 and "disabled" in relogin.err


def test_admin_cannot_disable_self(cli, server):
    login_admin(cli, server)
    result = cli("users", "disable", "admin")
    assert result.code == 1 and "[disable-self]" in result.err


def test_non_admin_cannot_add_users(cli, server, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    cli("users", "add", "dave", "--password-stdin", stdin="dave-password\n", token=admin_token)
    import httpx

    dave = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "dave", "password": "dave-password"}
    ).json()["token"]
    refused = cli("users", "add", "eve", token=dave)
    assert refused.code == 1
    assert "dave is not an admin and cannot add users" in refused.err
    assert "[admin-only]" in refused.err


def test_unreachable_server_says_what_to_do(cli, monkeypatch):
    monkeypatch.setenv("EVALKIT_SERVER_URL", "http://127.0.0.1:9")
    result = cli("whoami")
    assert result.code == 1
    assert result.err.count("\n") == 1
    assert "cannot reach the evalkit server at http://127.0.0.1:9" in result.err


def test_usage_error_exits_2_in_one_line(cli):
    result = cli("users", "add")
    assert result.code == 2
    assert result.err.count("\n") == 1 and "usage error" in result.err
