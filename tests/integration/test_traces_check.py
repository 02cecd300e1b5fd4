"""`evalkit traces check`: what the server makes of a session, through the real exporter."""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.datasets_helpers import add_user, login
from tests.integration.otel_helpers import (
    MAPPING,
    agent_session,
    exporter,
    make_agent,
    mint,
    recorder,
)


def test_check_shows_the_steps_and_what_went_unread(server, cli, admin_token):
    login(cli, server)
    make_agent(server, admin_token, "admin")
    token = mint(server, admin_token, "admin")
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS

    checked = cli("traces", "check", "s1", "--agent", "bot", "--json")
    report = checked.json
    assert report["spans_read"] == 3 and report["mapping_version"] == 1
    assert report["trajectory_valid"] is True, report["trajectory_errors"]
    assert report["steps"][0]["source"] == "user"
    assert any(step["tool_calls"] for step in report["steps"])
    assert checked.code == (1 if report["unread"] else 0)
    text = cli("traces", "check", "s1", "--agent", "bot")
    assert "spans read" in text.out and "trajectory: valid ATIF" in text.out

    missing = cli("traces", "check", "nope", "--agent", "bot")
    assert missing.code == 1 and "no session 'nope'" in missing.err


def test_excluded_spans_are_stored_and_readable_by_everyone(server, cli, admin_token):
    """exclude_spans only shapes the trajectory: the server keeps the excluded spans as sent,
    and any logged-in user reads them, so it is no way to keep span data private."""
    mapping = {**MAPPING, "exclude_spans": [{"name": "calculator"}]}
    make_agent(server, admin_token, "admin", mapping=mapping)
    token = mint(server, admin_token, "admin")
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS
    reader = add_user(server, admin_token, "rob")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)

    shown = cli("traces", "show", "s1", "--agent", "bot@admin", "--json", token=reader)
    assert shown.code == 0, shown.err
    [tool] = [s for s in shown.json["spans"] if s["name"] == "calculator"]
    assert tool["attributes"]["tool.name"] == "calculator"

    checked = cli("traces", "check", "s1", "--agent", "bot@admin", "--json", token=reader)
    report = checked.json
    assert report["trajectory_valid"] is True, report["trajectory_errors"]
    assert not any(step["tool_calls"] for step in report["steps"])
    assert report["trajectory"]["extra"]["evalkit"]["spans_excluded"] == 1
