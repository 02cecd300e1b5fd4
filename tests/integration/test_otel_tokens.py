"""Agent tokens and stored traces through the real CLI: mint (shown once), list, revoke,
who may do what, agent tokens refused outside the collector, traces list and show."""

from __future__ import annotations

import psycopg
import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.auth.tokens import AGENT_PREFIX, token_digest
from tests.integration.datasets_helpers import add_user, admin_api
from tests.integration.otel_helpers import (
    agent_session,
    api,
    exporter,
    make_agent,
    mint,
    recorder,
    sessions,
)


@pytest.fixture
def shared(server, admin_token):
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "dev"})
    make_agent(server, admin_token, "dev")
    writer = add_user(server, admin_token, "wanda", member_of="dev", role="writer")
    reader = add_user(server, admin_token, "rita", member_of="dev", role="reviewer")
    return writer, reader


def test_tokens_cli_mint_list_revoke(server, admin_token, shared, cli):
    writer, _ = shared
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    created = cli("tokens", "create", "--agent", "bot@dev", "--note", "prod", token=writer)
    assert created.code == 0, created.err
    token = created.out.strip()
    assert token.startswith(AGENT_PREFIX) and "shown once" in created.err
    with psycopg.connect(server.db_url) as conn:
        stored = conn.execute("SELECT token_hash, hint FROM agent_tokens").fetchone()
    assert bytes(stored[0]) == token_digest(token) and token not in str(stored)
    assert token.startswith(stored[1])

    listed = cli("tokens", "list", "--agent", "bot@dev", "--json", token=writer)
    assert listed.code == 0, listed.err
    [row] = listed.json
    assert (row["agent"], row["workspace"], row["note"], row["created_by"]) == (
        "bot",
        "dev",
        "prod",
        "wanda",
    )
    assert row["revoked_at"] is None and token not in listed.out
    table = cli("tokens", "list", token=writer)
    assert "bot@dev" in table.out and "active" in table.out

    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS

    revoked = cli("tokens", "revoke", str(row["id"]), token=writer)
    assert revoked.code == 0 and revoked.out.strip() == f"revoked token {row['id']} of bot@dev"
    assert cli("tokens", "revoke", str(row["id"]), token=writer).code == 0  # idempotent
    again = cli("tokens", "list", "--json", token=writer).json
    assert again[0]["revoked_at"] is not None and again[0]["last_used_at"] is not None
    assert exporter(server, token).export(spans) == SpanExportResult.FAILURE


def test_readers_cannot_mint_or_revoke(server, admin_token, shared, cli):
    writer, reader = shared
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    refused = cli("tokens", "create", "--agent", "bot@dev", token=reader)
    assert refused.code == 1
    assert "rita is not a writer of @dev and cannot manage its agents' tokens" in refused.err
    assert "[shared-writers-write]" in refused.err
    token_id = cli("tokens", "create", "--agent", "bot@dev", "--json", token=writer).json["info"][
        "id"
    ]
    refused = cli("tokens", "revoke", str(token_id), token=reader)
    assert refused.code == 1 and "[shared-writers-write]" in refused.err
    # reading is open to everyone logged in
    assert cli("tokens", "list", "--agent", "bot@dev", token=reader).code == 0
    # someone else's personal workspace: only its owner
    r = api(server, writer, "POST", "/api/workspaces/admin/agents/bot/tokens", json={})
    assert r.status_code in (403, 404)


def test_agent_token_is_refused_outside_the_collector(server, admin_token):
    make_agent(server, admin_token, "admin")
    token = mint(server, admin_token, "admin")
    for method, path in [
        ("GET", "/api/auth/whoami"),
        ("GET", "/api/agents"),
        ("GET", "/api/traces"),
        ("POST", "/api/workspaces/admin/agents/bot/tokens"),
    ]:
        r = api(server, token, method, path, json={})
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"] == {
            "code": "agent-token-scope",
            "message": "this route needs a user login, not an agent token (An agent token "
            "only sends traces for its own agent.)",
        }


def test_user_without_write_access_cannot_send_spans(server, admin_token, shared):
    _, reader = shared
    r = api(
        server,
        reader,
        "POST",
        "/api/otel/v1/traces",
        json={},
        headers={"X-Evalkit-Agent": "bot@dev"},
    )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "shared-writers-write"
    assert r.json()["message"].startswith("rita is not a writer of @dev and cannot send spans")


def test_traces_list_and_show(server, admin_token, cli):
    make_agent(server, admin_token, "admin")
    token = mint(server, admin_token, "admin")
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        agent_session(tracer, "s2")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS
    reader = add_user(server, admin_token, "rob")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)

    listed = cli("traces", "list", "--json", token=reader)
    assert listed.code == 0, listed.err
    assert sorted(s["session_id"] for s in listed.json) == ["s1", "s2"]
    assert all(s["span_count"] == 3 and s["agent"] == "bot" for s in listed.json)
    one = cli("traces", "list", "--agent", "bot@admin", "--limit", "1", "--json", token=reader)
    assert len(one.json) == 1

    shown = cli("traces", "show", "s1", "--agent", "bot@admin", token=reader)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0] == "session s1 of bot@admin"
    tree = [line.split(" [")[0] for line in lines[3:]]
    assert tree == ["agent", "  llm", "  calculator"]

    detail = cli("traces", "show", "s1", "--agent", "bot@admin", "--json", token=reader).json
    assert detail["session"]["span_count"] == 3
    assert [s["name"] for s in detail["spans"]] == ["agent", "llm", "calculator"]
    assert detail["spans"][0]["attributes"]["session.id"] == "s1"

    missing = cli("traces", "show", "nope", "--agent", "bot@admin", token=reader)
    assert missing.code == 1
    assert "agent bot@admin has no session 'nope'" in missing.err


def test_agent_tokens_do_not_expire_with_logins(server, admin_token):
    """An agent token minted years ago still sends spans after the login that minted it has
    expired: only revoking ends it (a login token of that age is refused)."""
    make_agent(server, admin_token, "admin")
    token = mint(server, admin_token, "admin")
    with psycopg.connect(server.db_url, autocommit=True) as conn:
        conn.execute("UPDATE agent_tokens SET created_at = now() - interval '5 years'")
        conn.execute(
            "UPDATE login_tokens SET created_at = now() - interval '5 years', "
            "expires_at = now() - interval '1 second'"
        )
    assert api(server, admin_token, "GET", "/api/auth/whoami").status_code == 401
    with recorder() as (tracer, memory):
        agent_session(tracer, "old-token")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS
    assert "old-token" in sessions(server)
