"""`evalkit cases from-session`: a case file from a session the real OpenTelemetry exporter
sent, that lint passes and sync stores like any case."""

from __future__ import annotations

import yaml
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.datasets_helpers import Repo, add_user, admin_api, login
from tests.integration.otel_helpers import (
    MAPPING,
    agent_session,
    exporter,
    make_agent,
    mint,
    recorder,
)


def send(server, token: str, workspace: str, *sessions: str, question: str = "What is 2 + 3?"):
    with recorder() as (tracer, memory):
        for session_id in sessions:
            agent_session(tracer, session_id, question=question)
        spans = memory.get_finished_spans()
    sender = exporter(server, mint(server, token, workspace))
    assert sender.export(spans) == SpanExportResult.SUCCESS


def send_to_a_quiet_agent(server, token: str, workspace: str, session_id: str) -> None:
    """A session of agent ``quiet``, whose mapping leaves out the root span that holds the
    question: its trajectory has no user turn, so it makes no case."""
    silent = {**MAPPING, "exclude_spans": [{"name": "agent"}]}
    make_agent(server, token, workspace, name="quiet", mapping=silent)
    with recorder() as (tracer, memory):
        agent_session(tracer, session_id)
        spans = memory.get_finished_spans()
    sender = exporter(server, mint(server, token, workspace, agent="quiet"))
    assert sender.export(spans) == SpanExportResult.SUCCESS


def test_a_session_becomes_a_case_that_lints_and_syncs(server, cli, admin_token, tmp_path):
    login(cli, server)
    make_agent(server, admin_token, "admin")
    send(server, admin_token, "admin", "chat-41")
    repo = Repo(tmp_path / "repo")
    suite = repo.root / "cases" / "traffic"

    made = cli(
        "cases", "from-session", "chat-41", "--into", str(suite), "--expected", "answer",
        "--tag", "mined", "--tag", "math", "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert made.json["action"] == "add" and made.json["case_id"] == "traffic-chat-41"
    assert made.json["agent"] == "bot@admin"
    path = suite / "traffic-chat-41.yaml"
    text = path.read_text()
    assert text.startswith("# From session chat-41 of agent bot@admin (last span 20")
    assert "# REVIEW: `expected` is the agent's own answer" in text
    assert text.index("# REVIEW") < text.index("\nexpected:")
    data = yaml.safe_load(text)
    assert data["input"] == {"question": "What is 2 + 3?"}
    assert data["expected"] == {"answer": "5"}
    assert data["tags"] == ["mined", "math"]
    mined = data["metadata"]["mined_from"]
    assert (mined["agent"], mined["session"], mined["mapping_version"]) == (
        "bot@admin",
        "chat-41",
        1,
    )

    linted = cli("lint", str(suite), "--offline")
    assert linted.code == 0 and "traffic: 1 case file, no problems" in linted.out, linted.out
    synced = cli("sync", str(suite), "--json")
    assert synced.code == 0, synced.err
    assert synced.json["added"] == ["traffic-chat-41"]
    shown = cli("cases", "show", "traffic-chat-41", "--json")
    assert shown.code == 0, shown.err
    assert "What is 2 + 3?" in shown.out

    again = cli("cases", "from-session", "chat-41", "--into", str(suite))
    assert again.code == 0, again.err
    assert "already holds session chat-41 of bot@admin" in again.out and "--force" in again.out
    assert path.read_text() == text and sorted(p.name for p in suite.iterdir()) == [path.name]


def test_force_rewrites_the_session_keys_and_keeps_hand_edits(server, cli, admin_token, tmp_path):
    login(cli, server)
    make_agent(server, admin_token, "admin")
    send(server, admin_token, "admin", "s1")
    suite = Repo(tmp_path / "repo").suite("qa")
    assert cli("cases", "from-session", "s1", "--into", str(suite)).code == 0
    path = suite / "qa-s1.yaml"
    assert "expected" not in yaml.safe_load(path.read_text())
    path.write_text(path.read_text() + "evaluators:\n  exact_match: true\n")
    moved = suite / "renamed.yaml"
    path.rename(moved)  # found again by metadata.mined_from, not by its name

    kept = cli("cases", "from-session", "s1", "--into", str(suite), "--json")
    assert kept.json["action"] == "exists" and kept.json["path"] == str(moved)
    forced = cli(
        "cases", "from-session", "s1", "--into", str(suite), "--expected", "answer",
        "--force", "--json",
    )  # fmt: skip
    assert forced.code == 0 and forced.json["action"] == "update", forced.err
    assert forced.json["case_id"] == "renamed"
    data = yaml.safe_load(moved.read_text())
    assert data["expected"] == {"answer": "5"} and data["evaluators"] == {"exact_match": True}
    assert "# REVIEW" in moved.read_text()
    same = cli(
        "cases", "from-session", "s1", "--into", str(suite), "--expected", "answer",
        "--force", "--json",
    )  # fmt: skip
    assert same.json["action"] == "unchanged"
    linted = cli("lint", str(suite), "--offline")
    assert linted.code == 0, linted.out


def test_any_logged_in_user_reads_the_session(server, cli, admin_token, tmp_path):
    """read-all: a user who is no member of the agent's workspace mines its sessions too."""
    make_agent(server, admin_token, "admin")
    send(server, admin_token, "admin", "s1")
    reader = add_user(server, admin_token, "rob")
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    suite = Repo(tmp_path / "repo").suite("qa")

    made = cli("cases", "from-session", "s1", "--into", str(suite), "--json", token=reader)
    assert made.code == 0 and made.json["agent"] == "bot@admin", made.err


def test_two_agents_with_the_session_id_need_agent(server, cli, admin_token, tmp_path):
    login(cli, server)
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "team"})
    make_agent(server, admin_token, "admin")
    make_agent(server, admin_token, "team")
    send(server, admin_token, "admin", "s1")
    send(server, admin_token, "team", "s1", question="What is 7 * 6?")
    suite = Repo(tmp_path / "repo").suite("qa")

    refused = cli("cases", "from-session", "s1", "--into", str(suite))
    assert refused.code == 2 and "2 agents have a session 's1'" in refused.err
    assert list(suite.iterdir()) == []
    first = cli(
        "cases", "from-session", "s1", "--into", str(suite), "--agent", "bot@team", "--json"
    )
    other = cli(
        "cases", "from-session", "s1", "--into", str(suite), "--agent", "bot@admin", "--json"
    )
    assert (first.json["action"], other.json["action"]) == ("add", "add"), other.err
    assert first.json["case_id"] == "qa-s1" and other.json["case_id"] == "qa-s1-2"
    assert yaml.safe_load((suite / "qa-s1.yaml").read_text())["input"]["question"] == (
        "What is 7 * 6?"
    )
    again = cli(
        "cases", "from-session", "s1", "--into", str(suite), "--agent", "bot@admin", "--json"
    )
    assert again.json == {**other.json, "action": "exists"}


def test_bad_input_names_the_thing_and_the_fix(server, cli, admin_token, tmp_path):
    login(cli, server)
    make_agent(server, admin_token, "admin")
    send_to_a_quiet_agent(server, admin_token, "admin", "q1")
    send(server, admin_token, "admin", "s1")
    repo = Repo(tmp_path / "repo")
    suite = repo.suite("qa")

    unknown = cli("cases", "from-session", "nope", "--into", str(suite))
    assert unknown.code == 1 and unknown.out == ""
    assert "no session 'nope' in any agent (2 agents searched: bot@admin, quiet@admin)" in (
        unknown.err
    )
    named = cli("cases", "from-session", "nope", "--into", str(suite), "--agent", "bot")
    assert named.code == 1 and "agent bot@admin has no session 'nope'" in named.err

    no_user = cli("cases", "from-session", "q1", "--into", str(suite))
    assert no_user.code == 1, no_user.out
    assert "session 'q1' of quiet@admin has no user turn with text" in no_user.err
    assert "mapping v1 read" in no_user.err and "evalkit traces check q1" in no_user.err

    a_file = repo.root / "cases" / "file.yaml"
    a_file.write_text("input: {}\n")
    not_dir = cli("cases", "from-session", "s1", "--into", str(a_file))
    assert not_dir.code == 1 and "is a file: give the suite's directory" in not_dir.err
    bad_name = cli("cases", "from-session", "s1", "--into", str(repo.root / "cases" / "no way"))
    assert bad_name.code == 1 and "pick another directory name" in bad_name.err
    bad_expected = cli("cases", "from-session", "s1", "--into", str(suite), "--expected", "all")
    assert bad_expected.code == 2
    empty_tag = cli("cases", "from-session", "s1", "--into", str(suite), "--tag", " ")
    assert empty_tag.code == 1 and "--tag needs text" in empty_tag.err
    assert list(suite.iterdir()) == []
