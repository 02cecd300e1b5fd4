"""`evalkit traces check`: what the server makes of a session, through the real exporter."""

from __future__ import annotations

import json

import httpx
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.otel.mapping import load_starter
from tests.integration.datasets_helpers import add_user, admin_api, login
from tests.integration.otel_helpers import (
    MAPPING,
    agent_session,
    api,
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


def send_session(server, token: str, workspace: str, session_id: str) -> None:
    """An agent ``bot`` in ``workspace`` (made with ``token``) and one session of it."""
    make_agent(server, token, workspace)
    with recorder() as (tracer, memory):
        agent_session(tracer, session_id)
        spans = memory.get_finished_spans()
    sender = exporter(server, mint(server, token, workspace))
    assert sender.export(spans) == SpanExportResult.SUCCESS


def test_without_agent_the_one_agent_that_has_the_session_is_checked(server, cli, admin_token):
    login(cli, server)
    send_session(server, admin_token, "admin", "s1")

    found = cli("traces", "check", "s1", "--json")
    named = cli("traces", "check", "s1", "--agent", "bot@admin", "--json")
    assert found.code == named.code and found.err == named.err == ""
    assert found.json == named.json
    assert found.json["session"]["agent"] == "bot" and found.json["spans_read"] == 3
    text = cli("traces", "check", "s1")
    assert text.out == cli("traces", "check", "s1", "--agent", "bot").out
    assert text.out.startswith("session s1 of bot@admin, mapping v1")


def test_a_session_id_two_agents_have_needs_agent(server, cli, admin_token):
    login(cli, server)
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "team"})
    send_session(server, admin_token, "admin", "s1")
    send_session(server, admin_token, "team", "s1")

    r = api(server, admin_token, "GET", "/api/traces/s1")
    assert r.status_code == 200, r.text
    assert [(s["agent"], s["workspace"]) for s in r.json()] == [("bot", "admin"), ("bot", "team")]

    refused = cli("traces", "check", "s1")
    assert refused.code == 2 and refused.out == ""
    assert "2 agents have a session 's1': bot@admin, bot@team" in refused.err
    assert "--agent NAME@WORKSPACE" in refused.err
    picked = cli("traces", "check", "s1", "--agent", "bot@team", "--json")
    assert picked.json["session"]["workspace"] == "team", picked.err
    assert picked.json["trajectory_valid"] is True


def test_a_session_in_someone_elses_personal_workspace(server, cli, admin_token):
    """read-all: every logged-in user reads every workspace, other people's personal ones
    included, so the lookup without --agent finds rob's session for sue too; an agent token
    (the collector only) and an anonymous caller find nothing."""
    rob = add_user(server, admin_token, "rob")
    sue = add_user(server, admin_token, "sue")
    send_session(server, rob, "rob", "r1")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)

    found = cli("traces", "check", "r1", "--json", token=sue)
    assert found.err == "" and found.json["session"]["workspace"] == "rob"
    named = cli("traces", "check", "r1", "--agent", "bot@rob", "--json", token=sue)
    assert found.json == named.json

    agent_token = mint(server, rob, "rob")
    refused = cli("traces", "check", "r1", token=agent_token)
    assert refused.code == 1 and "[agent-token-scope]" in refused.err
    anonymous = httpx.get(f"{server.url}/api/traces/r1")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "login-required"


def test_an_id_no_agent_has_is_no_such_session(server, cli, admin_token):
    login(cli, server)
    send_session(server, admin_token, "admin", "s1")

    missing = cli("traces", "check", "nope")
    assert missing.code == 1 and missing.out == ""
    assert "no agent has a session 'nope'" in missing.err
    assert missing.err.rstrip().endswith("[no-such-session]")
    r = api(server, admin_token, "GET", "/api/traces/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "no-such-session"


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


def pydantic_shaped_session(tracer, session_id: str) -> None:
    """GenAI parts as Pydantic AI sends them: the tool's return goes back to the model as a
    user message holding only a tool_call_response part."""
    question = {"role": "user", "parts": [{"type": "text", "content": "2 + 3?"}]}
    asked = {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2}}],
    }
    returned = {
        "role": "user",
        "parts": [{"type": "tool_call_response", "id": "c1", "name": "add", "result": "5"}],
    }
    answer = {"role": "assistant", "parts": [{"type": "text", "content": "5"}]}
    with tracer.start_as_current_span(
        "invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
    ) as root:
        root.set_attribute("gen_ai.conversation.id", session_id)
        for inputs, outputs in (([question], [asked]), ([question, asked, returned], [answer])):
            with tracer.start_as_current_span(
                "chat",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": json.dumps(inputs),
                    "gen_ai.output.messages": json.dumps(outputs),
                    "gen_ai.request.model": "gpt-test",
                    "gen_ai.usage.input_tokens": 10,
                    "gen_ai.usage.output_tokens": 2,
                },
            ):
                pass


def test_a_finding_fails_the_check_and_a_new_version_reads_the_stored_spans_again(
    server, cli, admin_token
):
    """An agent made with the genai mapping of before drop_empty: the check names the empty
    user step and exits 1; a new version, a starter given by name, reads the same stored
    spans without a re-export, and the check passes."""
    login(cli, server)
    old = load_starter("genai")
    for source in old["llm"]["input_messages"]:
        source.pop("drop_empty", None)
    make_agent(server, admin_token, "admin", mapping=old)
    token = mint(server, admin_token, "admin")
    with recorder() as (tracer, memory):
        pydantic_shaped_session(tracer, "p1")
        spans = memory.get_finished_spans()
    assert exporter(server, token).export(spans) == SpanExportResult.SUCCESS

    before = cli("traces", "check", "p1", "--agent", "bot", "--json")
    assert before.code == 1
    assert [f["rule"] for f in before.json["findings"]] == ["empty-user-step"]
    assert [s["source"] for s in before.json["steps"]] == ["user", "agent", "user", "agent"]
    text = cli("traces", "check", "p1", "--agent", "bot")
    assert text.code == 1 and "[empty-user-step]" in text.out and "drop_empty" in text.out

    assert cli("agents", "mapping", "set", "bot", "genai", "--activate").code == 0
    after = cli("traces", "check", "p1", "--agent", "bot", "--json")
    assert after.code == 0, after.json
    assert after.json["mapping_version"] == 2
    assert after.json["findings"] == [] and after.json["unread"] == []
    assert [s["source"] for s in after.json["steps"]] == ["user", "agent", "agent"]
    assert after.json["spans_read"] == before.json["spans_read"] == 3


def test_a_starter_name_where_a_mapping_file_goes(server, cli, tmp_path, monkeypatch):
    login(cli, server)
    made = cli("agents", "create", "traced", "--mapping", "vercel-ai", "--json")
    assert made.code == 0, made.err
    shown = cli("agents", "mapping", "show", "traced", "--json")
    assert shown.json["mapping"] == load_starter("vercel-ai")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "auto").write_text("{not json")  # a file of that name wins over the starter
    refused = cli("agents", "mapping", "set", "traced", "auto")
    assert refused.code == 2 and "not valid JSON" in refused.err
    missing = cli("agents", "mapping", "set", "traced", "openinferense")
    assert missing.code == 2 and "not a starter's name (openinference" in missing.err
