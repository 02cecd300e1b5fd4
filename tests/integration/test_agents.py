"""Agents through the real CLI and API: both kinds, keys at rest, access, egress, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psycopg
import pytest

from evalkit.auth.secrets import SecretBox
from evalkit.db import Database
from evalkit.otel.mapping import load_starter
from evalkit.store.agents import agent_api_key, get_agent, get_agent_by_id, key_context
from tests.conftest import start_server
from tests.integration.datasets_helpers import add_user, login

KEY = "sk-test-5f0c1d2e3a4b-very-secret"
OTHER_KEY = "sk-other-99887766"
PUBLIC_URL = "http://203.0.113.10:8700"
"""A documentation-range address: public to the egress policy, and never dialled here."""


@pytest.fixture
def as_admin(cli, server):
    login(cli, server)
    cli.monkeypatch.setenv("HARNESS_KEY", KEY)
    cli.monkeypatch.setenv("OTHER_KEY", OTHER_KEY)
    return cli


def write_mapping(path: Path, body: object) -> Path:
    path.write_text(json.dumps(body))
    return path


MAPPING = load_starter("openinference")


def api(server, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(
        method, server.url + path, headers={"Authorization": f"Bearer {token}"}, **kw
    )


def agent_row(server, name: str) -> dict:
    with psycopg.connect(server.db_url) as conn:
        row = conn.execute(
            "SELECT id, api_key, api_key_env FROM agents WHERE name = %s", (name,)
        ).fetchone()
    assert row is not None
    return {"id": row[0], "api_key": row[1], "api_key_env": row[2]}


def mapping_states(server, name: str) -> list[tuple[int, str]]:
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute(
            "SELECT m.version, m.state FROM span_mappings m JOIN agents a ON a.id = m.agent_id "
            "WHERE a.name = %s ORDER BY m.version",
            (name,),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


# --------------------------------------------------------------------------- both kinds


def test_harness_agent_create_list_show_edit_delete(as_admin):
    cli = as_admin
    created = cli(
        "agents",
        "create",
        "bot",
        "--harness-url",
        "http://localhost:8700",
        "--api-key-env",
        "HARNESS_KEY",
        "--max-concurrent-runs",
        "2",
        "--run-timeout",
        "90",
        "--provides",
        "trajectory=true",
        "tool_calls=false",
    )
    assert created.code == 0, created.err
    assert "created agent bot@admin: harness agent at http://localhost:8700" in created.out
    assert "API key from HARNESS_KEY stored encrypted" in created.out
    assert KEY not in created.out + created.err

    shown = cli("agents", "show", "bot@admin", "--json")
    assert KEY not in shown.out
    agent = shown.json
    assert agent.pop("created_at") and agent.pop("updated_at")
    assert agent == {
        "workspace": "admin",
        "name": "bot",
        "kind": "harness",
        "harness_url": "http://localhost:8700",
        "has_api_key": True,
        "api_key_env": "HARNESS_KEY",
        "trajectory_source": "harness",
        "max_concurrent_runs": 2,
        "run_timeout": 90.0,
        "poll_interval": 2.0,
        "stop_grace": 30.0,
        "trajectory_wait": 60.0,
        "provides": {"trajectory": True, "tool_calls": False},
        "mapping_version": None,
        "created_by": "admin",
    }
    text = cli("agents", "show", "bot")
    assert "stored (from HARNESS_KEY)" in text.out and KEY not in text.out
    assert "run timeout          90 s" in text.out

    listed = cli("agents", "list", "--json")
    assert KEY not in listed.out
    assert [(a["name"], a["workspace"], a["kind"]) for a in listed.json] == [
        ("bot", "admin", "harness")
    ]
    assert cli("agents", "list", "--workspace", "admin", "--json").json == listed.json
    table = cli("agents", "list")
    assert "bot@admin" in table.out and "http://localhost:8700" in table.out

    edited = cli(
        "agents", "edit", "bot", "--run-timeout", "30", "--provides", "thinking=yes", "--json"
    )
    assert edited.code == 0, edited.err
    assert KEY not in edited.out
    result = edited.json
    assert result["api_key_cleared"] is False
    assert result["agent"]["run_timeout"] == 30.0
    assert result["agent"]["max_concurrent_runs"] == 2
    assert result["agent"]["has_api_key"] is True
    assert result["agent"]["provides"] == {
        "trajectory": True,
        "tool_calls": False,
        "thinking": True,
    }

    deleted = cli("agents", "delete", "bot")
    assert deleted.code == 0, deleted.err
    assert deleted.out.strip() == "deleted agent bot@admin"
    assert cli("agents", "list", "--json").json == []
    gone = cli("agents", "show", "bot")
    assert gone.code == 1
    assert "no agent bot@admin; see `evalkit agents list --workspace admin`" in gone.err


def test_code_driven_agent_and_mapping_versions(as_admin, server, tmp_path):
    cli = as_admin
    mapping = write_mapping(tmp_path / "mapping.json", MAPPING)
    created = cli("agents", "create", "traced", "--mapping", str(mapping), "--json")
    assert created.code == 0, created.err
    agent = created.json
    assert agent["kind"] == "code" and agent["harness_url"] is None
    assert agent["trajectory_source"] == "otel"
    assert agent["mapping_version"] == 1 and agent["has_api_key"] is False
    assert mapping_states(server, "traced") == [(1, "active")]

    second = write_mapping(tmp_path / "v2.json", {**MAPPING, "answer": [{"span": "last_llm"}]})
    edited = cli("agents", "edit", "traced@admin", "--mapping", str(second))
    assert edited.code == 0, edited.err
    assert "span mapping v2 active (v1 retired)" in edited.out
    assert mapping_states(server, "traced") == [(1, "retired"), (2, "active")]
    third = cli("agents", "edit", "traced", "--mapping", str(second), "--json").json
    assert third["agent"]["mapping_version"] == 3 and third["mapping_retired"] == 2

    # a code-driven agent cannot be given a key, nor take trajectories from a harness
    keyed = cli("agents", "edit", "traced", "--api-key-env", "HARNESS_KEY")
    assert keyed.code == 1 and "[key-without-harness]" in keyed.err
    harness = cli("agents", "edit", "traced", "--trajectory-source", "harness")
    assert harness.code == 1 and "[harness-source-without-url]" in harness.err

    # it becomes a harness agent, keeping the traces as its trajectory source
    moved = cli("agents", "edit", "traced", "--harness-url", "http://localhost:9000", "--json")
    assert moved.code == 0, moved.err
    assert moved.json["agent"]["kind"] == "harness"
    assert moved.json["agent"]["trajectory_source"] == "otel"

    assert cli("agents", "delete", "traced").code == 0
    assert mapping_states(server, "traced") == []


def test_every_create_and_edit_flag_is_stored(as_admin, tmp_path):
    cli = as_admin
    mapping = write_mapping(tmp_path / "m.json", MAPPING)
    created = cli(
        "agents", "create", "full", "--workspace", "admin",
        "--harness-url", "http://localhost:8700", "--api-key-env", "HARNESS_KEY",
        "--trajectory-source", "otel", "--mapping", str(mapping),
        "--max-concurrent-runs", "3", "--run-timeout", "12.5", "--poll-interval", "0.5",
        "--stop-grace", "4", "--trajectory-wait", "9",
        "--provides", "trajectory=false", "workspace=true", "--json",
    )  # fmt: skip
    assert created.code == 0, created.err
    settings = (
        "kind", "harness_url", "has_api_key", "api_key_env", "trajectory_source",
        "mapping_version", "max_concurrent_runs", "run_timeout", "poll_interval",
        "stop_grace", "trajectory_wait", "provides",
    )  # fmt: skip
    shown = cli("agents", "show", "full@admin", "--json").json
    assert {k: shown[k] for k in settings} == {
        "kind": "harness",
        "harness_url": "http://localhost:8700",
        "has_api_key": True,
        "api_key_env": "HARNESS_KEY",
        "trajectory_source": "otel",
        "mapping_version": 1,
        "max_concurrent_runs": 3,
        "run_timeout": 12.5,
        "poll_interval": 0.5,
        "stop_grace": 4.0,
        "trajectory_wait": 9.0,
        "provides": {"trajectory": False, "workspace": True},
    }
    text = cli("agents", "show", "full").out
    for line in (
        "stop grace           4 s",
        "trajectory wait      9 s",
        "poll interval        0.5 s",
        "provides             workspace",
    ):
        assert line in text, text

    edited = cli(
        "agents", "edit", "full", "--workspace", "admin",
        "--harness-url", "http://localhost:8800", "--api-key-env", "OTHER_KEY",
        "--trajectory-source", "harness", "--mapping", str(mapping),
        "--max-concurrent-runs", "7", "--run-timeout", "60", "--poll-interval", "1",
        "--stop-grace", "0", "--trajectory-wait", "0", "--provides", "trajectory=true",
        "--json",
    )  # fmt: skip
    assert edited.code == 0, edited.err
    assert edited.json["api_key_cleared"] is False  # the new URL came with a new key
    shown = cli("agents", "show", "full@admin", "--json").json
    assert {k: shown[k] for k in settings} == {
        "kind": "harness",
        "harness_url": "http://localhost:8800",
        "has_api_key": True,
        "api_key_env": "OTHER_KEY",
        "trajectory_source": "harness",
        "mapping_version": 2,
        "max_concurrent_runs": 7,
        "run_timeout": 60.0,
        "poll_interval": 1.0,
        "stop_grace": 0.0,
        "trajectory_wait": 0.0,
        "provides": {"trajectory": True, "workspace": True},
    }


# --------------------------------------------------------------------------- keys


async def test_key_is_stored_encrypted_and_only_the_store_reads_it(as_admin, server):
    cli = as_admin
    assert (
        cli(
            "agents",
            "create",
            "bot",
            "--harness-url",
            "http://localhost:1",
            "--api-key-env",
            "HARNESS_KEY",
        ).code
        == 0
    )
    row = agent_row(server, "bot")
    stored = row["api_key"]
    assert stored and KEY not in stored and stored.startswith("v1:")
    box = SecretBox(server.settings.encryption_key)
    assert box.decrypt(stored, key_context(row["id"])) == KEY
    assert row["api_key_env"] == "HARNESS_KEY"

    db = Database(server.db_url)
    await db.open()
    try:
        async with db.connection() as conn:
            assert await agent_api_key(conn, row["id"], box) == KEY
            agent = await get_agent_by_id(conn, row["id"])
            assert agent.has_api_key and agent.kind == "harness" and agent.ref == "bot@admin"
            assert agent.workspace_facts.kind == "personal"
            same = await get_agent(conn, agent.workspace_id, "bot")
            assert same == agent
            assert KEY not in repr(agent)
    finally:
        await db.close()

    # the API never returns the key or its ciphertext, in any answer
    for out in (
        cli("agents", "show", "bot", "--json").out,
        cli("agents", "list", "--json").out,
        cli("agents", "edit", "bot", "--poll-interval", "1", "--json").out,
    ):
        assert KEY not in out and stored not in out and stored[3:20] not in out


def test_raw_api_answers_never_carry_the_key(server, admin_token):
    body = {
        "name": "raw",
        "harness_url": "http://localhost:8700",
        "api_key": KEY,
        "api_key_env": "HARNESS_KEY",
    }
    created = api(server, admin_token, "POST", "/api/workspaces/admin/agents", json=body)
    assert created.status_code == 201, created.text
    stored = agent_row(server, "raw")["api_key"]
    answers = [
        created,
        api(server, admin_token, "GET", "/api/workspaces/admin/agents/raw"),
        api(server, admin_token, "GET", "/api/workspaces/admin/agents"),
        api(server, admin_token, "GET", "/api/agents"),
        api(
            server,
            admin_token,
            "PATCH",
            "/api/workspaces/admin/agents/raw",
            json={"api_key": OTHER_KEY, "run_timeout": 5},
        ),
    ]
    for answer in answers:
        assert answer.status_code in (200, 201), answer.text
        for secret in (KEY, OTHER_KEY, stored, stored[3:20]):
            assert secret not in answer.text
        assert 'api_key"' not in answer.text.replace('has_api_key"', "")
    row = agent_row(server, "raw")
    box = SecretBox(server.settings.encryption_key)
    assert box.decrypt(row["api_key"], key_context(row["id"])) == OTHER_KEY

    # api_key: null removes the key; harness_url: null makes the agent code-driven
    removed = api(
        server, admin_token, "PATCH", "/api/workspaces/admin/agents/raw", json={"api_key": None}
    )
    assert removed.json()["api_key_cleared"] is True
    assert removed.json()["agent"]["has_api_key"] is False
    assert agent_row(server, "raw")["api_key"] is None
    code = api(
        server,
        admin_token,
        "PATCH",
        "/api/workspaces/admin/agents/raw",
        json={"harness_url": None, "trajectory_source": "otel", "mapping": MAPPING},
    )
    assert code.status_code == 200, code.text
    assert code.json()["agent"]["kind"] == "code"
    assert code.json()["agent"]["api_key_env"] is None


def test_url_change_clears_the_key_unless_a_new_one_comes_with_it(as_admin, server, tmp_path):
    cli = as_admin
    cli(
        "agents",
        "create",
        "bot",
        "--harness-url",
        "http://localhost:8700",
        "--api-key-env",
        "HARNESS_KEY",
    )
    same = cli("agents", "edit", "bot", "--harness-url", "http://localhost:8700", "--json")
    assert same.json["api_key_cleared"] is False and same.json["agent"]["has_api_key"] is True

    moved = cli("agents", "edit", "bot", "--harness-url", "http://localhost:8800")
    assert moved.code == 0, moved.err
    assert "stored key cleared" in moved.out
    shown = cli("agents", "show", "bot", "--json").json
    assert shown["has_api_key"] is False and shown["api_key_env"] is None
    assert agent_row(server, "bot")["api_key"] is None

    rekeyed = cli(
        "agents",
        "edit",
        "bot",
        "--harness-url",
        "http://localhost:8900",
        "--api-key-env",
        "OTHER_KEY",
    )
    assert rekeyed.code == 0 and "stored key cleared" not in rekeyed.out
    assert "API key from OTHER_KEY stored encrypted" in rekeyed.out
    row = agent_row(server, "bot")
    box = SecretBox(server.settings.encryption_key)
    assert box.decrypt(row["api_key"], key_context(row["id"])) == OTHER_KEY

    # '' makes it code-driven: the key goes, and its trajectories must come from traces
    mapping = write_mapping(tmp_path / "m.json", MAPPING)
    refused = cli("agents", "edit", "bot", "--harness-url", "")
    assert refused.code == 1 and "[harness-source-without-url]" in refused.err
    coded = cli(
        "agents",
        "edit",
        "bot",
        "--harness-url",
        "",
        "--trajectory-source",
        "otel",
        "--mapping",
        str(mapping),
    )
    assert coded.code == 0, coded.err
    assert "code-driven agent" in coded.out and "stored key cleared" in coded.out
    assert agent_row(server, "bot")["api_key"] is None


# --------------------------------------------------------------------------- access


def test_who_may_manage_agents(cli, server, admin_token, tmp_path):
    login(cli, server)
    assert cli("workspaces", "create", "team").code == 0
    writer = add_user(server, admin_token, "wendy", member_of="team")
    reader = add_user(server, admin_token, "rob", member_of="team", role="reviewer")
    other = add_user(server, admin_token, "olga")
    mapping = str(write_mapping(tmp_path / "m.json", MAPPING))
    shared = ("agents", "create", "bot@team", "--harness-url", PUBLIC_URL)

    refused = cli(*shared, token=reader)
    assert refused.code == 1
    assert "rob is not a writer of @team and cannot manage agents in it" in refused.err
    assert "[shared-writers-write]" in refused.err
    made = cli(*shared, token=writer)
    assert made.code == 0, made.err
    # everyone reads
    for token in (reader, other):
        assert cli("agents", "show", "bot@team", "--json", token=token).json["name"] == "bot"
    for args in (
        ("agents", "edit", "bot@team", "--run-timeout", "5"),
        ("agents", "delete", "bot@team", "--yes"),
    ):
        no = cli(*args, token=reader)
        assert no.code == 1 and "[shared-writers-write]" in no.err, no.err
    assert cli("agents", "edit", "bot@team", "--run-timeout", "5", token=writer).code == 0
    # an admin who is not a member manages a shared workspace's agents
    assert cli("agents", "edit", "bot", "--workspace", "team", "--stop-grace", "0").code == 0
    assert cli("agents", "create", "helper@team", "--mapping", mapping).code == 0
    assert cli("agents", "delete", "helper@team").code == 0

    # a personal workspace: its owner only (admins included in "others")
    own = cli("agents", "create", "mine", "--mapping", mapping, token=writer)
    assert own.code == 0, own.err
    for token in (other, reader, admin_token):
        for args in (
            ("agents", "create", "intruder@wendy", "--mapping", mapping),
            ("agents", "edit", "mine@wendy", "--run-timeout", "1"),
            ("agents", "delete", "mine@wendy"),
        ):
            no = cli(*args, token=token)
            assert no.code == 1 and "[personal-owner-writes]" in no.err, (args, no.err)
        assert cli("agents", "show", "mine@wendy", token=token).code == 0
    assert cli("agents", "delete", "bot@team", token=writer).code == 0


# --------------------------------------------------------------------------- egress


def test_shared_harness_urls_pass_the_egress_policy(as_admin, server, tmp_path):
    cli = as_admin
    assert cli("workspaces", "create", "team").code == 0
    loopback = cli("agents", "create", "bot@team", "--harness-url", "http://127.0.0.1:8700")
    assert loopback.code == 1
    assert "refused the outbound call to http://127.0.0.1:8700" in loopback.err
    assert "loopback" in loopback.err and "egress.allow_private" in loopback.err
    assert "[egress-refused]" in loopback.err
    metadata = cli("agents", "create", "bot@team", "--harness-url", "http://169.254.169.254/")
    assert metadata.code == 1 and "link-local" in metadata.err
    named = cli("agents", "create", "bot@team", "--harness-url", "http://localhost:8700")
    assert named.code == 1 and "localhost resolves to" in named.err
    assert cli("agents", "list", "--json").json == []

    # a personal agent is driven by its owner's CLI, so its URL is not checked
    assert cli("agents", "create", "local", "--harness-url", "http://127.0.0.1:8700").code == 0
    # and a shared one is checked on edit too
    assert cli("agents", "create", "bot@team", "--harness-url", PUBLIC_URL).code == 0
    private = cli("agents", "edit", "bot@team", "--harness-url", "http://10.1.2.3/")
    assert private.code == 1 and "private" in private.err and "[egress-refused]" in private.err
    assert cli("agents", "show", "bot@team", "--json").json["harness_url"] == PUBLIC_URL


@pytest.mark.parametrize(
    "egress",
    [{"allow_private": True}, {"allowed_prefixes": ["http://127.0.0.1:8700/"]}],
    ids=["allow_private", "allowed_prefixes"],
)
def test_a_relaxed_policy_accepts_private_harness_urls(cli, new_database, tmp_path, egress):
    def relax(settings):
        for key, value in egress.items():
            setattr(settings.egress, key, value)

    relaxed = start_server(new_database(), tmp_path, configure=relax)
    try:
        login(cli, relaxed)
        assert cli("workspaces", "create", "team").code == 0
        made = cli("agents", "create", "bot@team", "--harness-url", "http://127.0.0.1:8700/")
        assert made.code == 0, made.err
        other = cli("agents", "create", "two@team", "--harness-url", "http://127.0.0.1:9999/")
        if "allowed_prefixes" in egress:
            assert other.code == 1 and "egress.allowed_prefixes" in other.err
        else:
            assert other.code == 0, other.err
    finally:
        relaxed.stop()


# --------------------------------------------------------------------------- delete


def _add_experiment(server, agent: str, status: str) -> None:
    with psycopg.connect(server.db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO experiments (workspace_id, dataset_id, agent_id, driver, status) "
            "SELECT a.workspace_id, d.id, a.id, 'cli', %s FROM agents a "
            "JOIN datasets d ON d.workspace_id = a.workspace_id "
            "WHERE a.name = %s AND d.name = 'ds'",
            (status, agent),
        )


def test_delete_with_experiments(as_admin, server, admin_token):
    cli = as_admin
    assert cli("datasets", "create", "ds").code == 0
    cli("agents", "create", "bot", "--harness-url", "http://localhost:8700")
    _add_experiment(server, "bot", "running")
    _add_experiment(server, "bot", "finished")

    running = cli("agents", "delete", "bot", "--yes")
    assert running.code == 1
    assert "agent bot@admin has 1 experiment running" in running.err
    assert "[agent-running]" in running.err
    with psycopg.connect(server.db_url, autocommit=True) as conn:
        conn.execute("UPDATE experiments SET status = 'finished'")

    unforced = cli("agents", "delete", "bot")
    assert unforced.code == 1
    assert "agent bot@admin has 2 experiments, which would be deleted with it" in unforced.err
    assert "`evalkit agents delete bot@admin --yes`" in unforced.err
    api_refusal = api(server, admin_token, "DELETE", "/api/workspaces/admin/agents/bot")
    assert api_refusal.status_code == 409
    assert api_refusal.json()["error"]["code"] == "agent-has-experiments"
    assert "?force=true" in api_refusal.json()["error"]["message"]
    bad = api(server, admin_token, "DELETE", "/api/workspaces/admin/agents/bot?force=maybe")
    assert bad.status_code == 400

    forced = cli("agents", "delete", "bot", "--yes")
    assert forced.code == 0, forced.err
    assert forced.out.strip() == "deleted agent bot@admin and its 2 experiments"
    with psycopg.connect(server.db_url) as conn:
        assert conn.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
    assert "--yes" in cli("agents", "delete", "--help").out


# --------------------------------------------------------------------------- bad input


def test_bad_input(as_admin, server, tmp_path):
    cli = as_admin
    url = ("--harness-url", "http://localhost:8700")

    unknown = cli("agents", "create", "bot", *url, "--provides", "telepathy=true")
    assert unknown.code == 1
    assert (
        "provides has unknown key(s) telepathy" in unknown.err and "[bad-provides]" in unknown.err
    )
    value = cli("agents", "create", "bot", *url, "--provides", "trajectory=maybe")
    assert value.code == 2 and "the value of trajectory must be true or false" in value.err
    shape = cli("agents", "create", "bot", *url, "--provides", "trajectory")
    assert shape.code == 2 and "write KEY=true or KEY=false" in shape.err

    negative = cli("agents", "create", "bot", *url, "--run-timeout", "-5")
    assert negative.code == 1
    assert "run_timeout must be more than 0 seconds, not -5.0" in negative.err
    for flag, value, message in (
        ("--poll-interval", "0", "poll_interval must be more than 0 seconds"),
        ("--stop-grace", "-1", "stop_grace must be 0 or more seconds"),
        ("--trajectory-wait", "-0.5", "trajectory_wait must be 0 or more seconds"),
        ("--max-concurrent-runs", "0", "max_concurrent_runs must be between 1 and 1000"),
        ("--max-concurrent-runs", "1001", "max_concurrent_runs must be between 1 and 1000"),
    ):
        result = cli("agents", "create", "bot", *url, flag, value)
        assert result.code == 1 and message in result.err, (flag, result.err)
        assert "[bad-agent-setting]" in result.err

    otel = cli("agents", "create", "bot", *url, "--trajectory-source", "otel")
    assert otel.code == 1 and "pass --mapping FILE" in otel.err and "[mapping-required]" in otel.err
    code_driven = cli("agents", "create", "bot")
    assert code_driven.code == 1 and "pass --mapping FILE" in code_driven.err

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "session_id": "a",\n  "answer": \n}\n')
    bad_json = cli("agents", "create", "bot", "--mapping", str(broken))
    assert bad_json.code == 2
    assert f"--mapping {broken}: not valid JSON at line 4, column 1" in bad_json.err
    listed = write_mapping(tmp_path / "list.json", ["session_id"])
    not_object = cli("agents", "create", "bot", "--mapping", str(listed))
    assert not_object.code == 2 and "must be a JSON object, not a list" in not_object.err
    missing = cli("agents", "create", "bot", "--mapping", str(tmp_path / "nope.json"))
    assert missing.code == 2 and "nope.json: no such file" in missing.err
    empty = write_mapping(tmp_path / "empty.json", {})
    blank = cli("agents", "create", "bot", "--mapping", str(empty))
    assert blank.code == 1 and "[bad-mapping]" in blank.err

    cli.monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    unset = cli("agents", "create", "bot", *url, "--api-key-env", "NO_SUCH_KEY_VAR")
    assert unset.code == 2
    assert "--api-key-env NO_SUCH_KEY_VAR: the environment variable NO_SUCH_KEY_VAR is not set" in (
        unset.err
    )
    cli.monkeypatch.setenv("EMPTY_KEY_VAR", "")
    empty_var = cli("agents", "create", "bot", *url, "--api-key-env", "EMPTY_KEY_VAR")
    assert empty_var.code == 2 and "EMPTY_KEY_VAR is empty" in empty_var.err

    mapping = str(write_mapping(tmp_path / "m.json", MAPPING))
    keyed = cli("agents", "create", "bot", "--mapping", mapping, "--api-key-env", "HARNESS_KEY")
    assert keyed.code == 1 and "[key-without-harness]" in keyed.err
    source = cli("agents", "create", "bot", "--mapping", mapping, "--trajectory-source", "harness")
    assert source.code == 1 and "[harness-source-without-url]" in source.err
    bad_url = cli("agents", "create", "bot", "--harness-url", "ftp://files.example")
    assert bad_url.code == 1 and "[bad-harness-url]" in bad_url.err
    bad_name = cli("agents", "create", "Bad Name", *url)
    assert bad_name.code == 1 and "[bad-name]" in bad_name.err
    clash = cli("agents", "create", "bot@admin", "--workspace", "team", *url)
    assert clash.code == 2 and "names workspace admin but --workspace says team" in clash.err
    nothing = cli("agents", "edit", "bot")
    assert nothing.code == 2 and "nothing to change" in nothing.err

    assert cli("agents", "create", "bot", *url).code == 0
    duplicate = cli("agents", "create", "bot", "--workspace", "admin", *url)
    assert duplicate.code == 1
    assert "agent bot@admin already exists" in duplicate.err and "[agent-exists]" in duplicate.err
    ghost = cli("agents", "edit", "ghost", "--run-timeout", "1")
    assert ghost.code == 1 and "[no-such-agent]" in ghost.err
    no_ws = cli("agents", "show", "bot@nowhere")
    assert no_ws.code == 1 and "no workspace named 'nowhere'" in no_ws.err
    assert [a["name"] for a in cli("agents", "list", "--json").json] == ["bot"]


def test_api_duplicate_is_409_and_unknown_fields_400(server, admin_token):
    body = {"name": "dup", "harness_url": "http://localhost:1"}
    path = "/api/workspaces/admin/agents"
    assert api(server, admin_token, "POST", path, json=body).status_code == 201
    again = api(server, admin_token, "POST", path, json=body)
    assert again.status_code == 409 and again.json()["error"]["code"] == "agent-exists"
    extra = api(server, admin_token, "POST", path, json={**body, "name": "x", "colour": "red"})
    assert extra.status_code == 400 and "unknown field `colour`" in extra.text
    leaked = api(server, admin_token, "PATCH", path + "/dup", json={"api_key_ciphertext": "x"})
    assert leaked.status_code == 400
