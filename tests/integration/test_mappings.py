"""Span mapping versions through the real CLI and API: set (a draft), activate, show, list,
the starters, every problem of a bad mapping at once, and who may change them."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psycopg

from evalkit.otel.mapping import load_starter
from tests.integration.datasets_helpers import add_user, login

OI = load_starter("openinference")
GENAI = load_starter("genai")


def write(path: Path, body: object) -> str:
    path.write_text(json.dumps(body))
    return str(path)


def states(server, agent: str) -> list[tuple[int, str]]:
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute(
            "SELECT m.version, m.state FROM span_mappings m JOIN agents a ON a.id = m.agent_id "
            "WHERE a.name = %s ORDER BY m.version",
            (agent,),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def api(server, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(
        method, server.url + path, headers={"Authorization": f"Bearer {token}"}, **kw
    )


def test_set_is_a_draft_until_activated(cli, server, tmp_path):
    login(cli, server)
    created = cli("agents", "create", "traced", "--mapping", write(tmp_path / "oi.json", OI))
    assert created.code == 0, created.err
    assert states(server, "traced") == [(1, "active")]

    added = cli("agents", "mapping", "set", "traced", write(tmp_path / "g.json", GENAI))
    assert added.code == 0, added.err
    assert added.out.strip() == (
        "span mapping v2 of traced@admin saved as a draft; make it the active one with "
        "`evalkit agents mapping activate traced@admin 2`"
    )
    assert states(server, "traced") == [(1, "active"), (2, "draft")]
    # the draft is not used: the agent still says v1
    assert cli("agents", "show", "traced", "--json").json["mapping_version"] == 1

    active = cli("agents", "mapping", "show", "traced@admin", "--json").json
    assert active.pop("created_at")
    assert active == {
        "workspace": "admin",
        "agent": "traced",
        "version": 1,
        "state": "active",
        "created_by": "admin",
        "mapping": OI,
    }
    draft = cli("agents", "mapping", "show", "traced", "--version", "2").out
    assert draft.startswith("span mapping v2 of traced@admin: draft\ncreated ")
    assert json.loads(draft.split("\n", 2)[2]) == GENAI

    activated = cli("agents", "mapping", "activate", "traced", "2")
    assert activated.code == 0, activated.err
    assert activated.out.strip() == "span mapping v2 of traced@admin is active (v1 retired)"
    assert states(server, "traced") == [(1, "retired"), (2, "active")]
    assert cli("agents", "show", "traced", "--json").json["mapping_version"] == 2
    again = cli("agents", "mapping", "activate", "traced", "2", "--json")
    assert again.json == {
        "workspace": "admin",
        "agent": "traced",
        "version": 2,
        "retired": None,
        "already_active": True,
    }
    assert "was already active" in cli("agents", "mapping", "activate", "traced", "2").out

    # a retired version comes back (a rollback)
    back = cli("agents", "mapping", "activate", "traced", "1")
    assert back.out.strip() == "span mapping v1 of traced@admin is active (v2 retired)"
    # --activate skips the draft
    now = cli("agents", "mapping", "set", "traced", str(tmp_path / "g.json"), "--activate")
    assert now.out.strip() == "span mapping v3 of traced@admin is active"
    assert states(server, "traced") == [(1, "retired"), (2, "retired"), (3, "active")]

    listed = cli("agents", "mapping", "list", "traced", "--json").json
    assert [(m["version"], m["state"]) for m in listed] == [
        (3, "active"),
        (2, "retired"),
        (1, "retired"),
    ]
    table = cli("agents", "mapping", "list", "traced").out.splitlines()
    assert table[0].split() == ["VERSION", "STATE", "CREATED", "BY"]
    assert table[1].split()[:2] == ["v3", "active"] and table[1].split()[3] == "admin"

    # agents edit --mapping still makes the next version active at once
    edited = cli("agents", "edit", "traced", "--mapping", str(tmp_path / "oi.json"))
    assert "span mapping v4 active (v3 retired)" in edited.out


def test_bad_mappings_are_refused_with_every_problem(cli, server, tmp_path):
    login(cli, server)
    assert cli("agents", "create", "traced", "--mapping", write(tmp_path / "a.json", OI)).code == 0
    bad = {**OI, "session_id": 5, "colour": "red"}
    del bad["answer"]
    refused = cli("agents", "mapping", "set", "traced", write(tmp_path / "bad.json", bad))
    assert refused.code == 1
    assert refused.err.strip() == (
        "evalkit: error: the span mapping has 3 problems: colour: [unknown-key] is not a "
        "mapping key; the keys here are agent_version, answer, exclude_spans, format, input, "
        "llm, session_id, span_kinds, tool; session_id: [bad-type] must be an attribute name, "
        'a reference {"attribute": ..., "path": ...} into a JSON attribute, or a list of them, '
        "not a number; answer: [missing-key] is required; add it (a list, see "
        "docs/tracing.md) (the format: docs/tracing.md; a starting point: `evalkit agents "
        "mapping starter openinference|genai|vercel-ai|auto`) [bad-mapping]"
    )
    assert states(server, "traced") == [(1, "active")]

    # agent create and edit check a mapping the same way
    for args in (
        ("agents", "create", "other", "--mapping", str(tmp_path / "bad.json")),
        ("agents", "edit", "traced", "--mapping", str(tmp_path / "bad.json")),
    ):
        no = cli(*args)
        assert no.code == 1 and "the span mapping has 3 problems" in no.err, no.err
    semantic = {**OI, "answer": [{"span": "root"}]}
    no = cli("agents", "mapping", "set", "traced", write(tmp_path / "s.json", semantic))
    assert 'answer[0].attribute: [missing-key] is required with "span": "root"' in no.err

    # the file itself: read locally, refused before any call
    missing = cli("agents", "mapping", "set", "traced", str(tmp_path / "nope.json"))
    assert missing.code == 2 and "nope.json: no such file" in missing.err
    broken = tmp_path / "broken.json"
    broken.write_text('{"session_id": ')
    not_json = cli("agents", "mapping", "set", "traced", str(broken))
    assert not_json.code == 2 and f"{broken}: not valid JSON at line 1, column 16" in not_json.err
    listed = cli("agents", "mapping", "set", "traced", write(tmp_path / "l.json", [OI]))
    assert listed.code == 2 and "must be a JSON object, not a list" in listed.err


def test_show_and_activate_errors(cli, server, admin_token, tmp_path):
    login(cli, server)
    harness = ("agents", "create", "bot", "--harness-url", "http://localhost:8700")
    assert cli(*harness).code == 0
    none = cli("agents", "mapping", "show", "bot")
    assert none.code == 1
    assert "agent bot@admin has no active span mapping; add one with `evalkit agents" in none.err
    assert "[no-active-mapping]" in none.err
    assert cli("agents", "mapping", "list", "bot", "--json").json == []
    for args in (
        ("agents", "mapping", "show", "bot", "--version", "9"),
        ("agents", "mapping", "activate", "bot", "9"),
    ):
        no = cli(*args)
        assert no.code == 1 and "agent bot@admin has no span mapping version 9" in no.err
        assert "[no-such-mapping-version]" in no.err
    ghost = cli("agents", "mapping", "show", "ghost")
    assert ghost.code == 1 and "no agent ghost@admin" in ghost.err
    usage = cli("agents", "mapping", "activate", "bot", "two")
    assert usage.code == 2

    base = "/api/workspaces/admin/agents/bot/mappings"
    for method, path in (("GET", f"{base}/abc"), ("POST", f"{base}/active/activate")):
        r = api(server, admin_token, method, path)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "bad-mapping-version"
    r = api(server, admin_token, "POST", base, json={"mapping": OI, "state": "active"})
    assert r.status_code == 400 and "unknown field `state`" in r.json()["error"]["message"]
    r = api(server, admin_token, "POST", base, json={"mapping": {"x": "y" * 300_000}})
    assert r.status_code == 413
    r = api(server, admin_token, "POST", base, json={"mapping": OI})
    assert r.status_code == 201 and r.json()["state"] == "draft"


def test_starters_print_without_a_server(cli):
    for name, body in (("openinference", OI), ("genai", GENAI)):
        printed = cli("agents", "mapping", "starter", name)
        assert printed.code == 0 and json.loads(printed.out) == body
        assert cli("agents", "mapping", "starter", name, "--json").json == body
    unknown = cli("agents", "mapping", "starter", "langfuse")
    assert unknown.code == 2 and "usage error" in unknown.err


def test_who_may_change_mappings(cli, server, admin_token, tmp_path):
    login(cli, server)
    assert cli("workspaces", "create", "team").code == 0
    writer = add_user(server, admin_token, "wendy", member_of="team")
    reader = add_user(server, admin_token, "rob", member_of="team", role="reviewer")
    file = write(tmp_path / "m.json", OI)
    assert cli("agents", "create", "bot@team", "--mapping", file).code == 0

    for token in (reader,):
        for args in (
            ("agents", "mapping", "set", "bot@team", file),
            ("agents", "mapping", "activate", "bot@team", "1"),
        ):
            no = cli(*args, token=token)
            assert no.code == 1, no.err
            assert "rob is not a writer of @team and cannot change the span mappings" in no.err
            assert "[shared-writers-write]" in no.err
        assert cli("agents", "mapping", "show", "bot@team", "--json", token=token).code == 0
        assert cli("agents", "mapping", "list", "bot@team", token=token).code == 0
    assert cli("agents", "mapping", "set", "bot@team", file, token=writer).code == 0
    assert cli("agents", "mapping", "activate", "bot@team", "2", token=writer).code == 0
    assert states(server, "bot") == [(1, "retired"), (2, "active")]

    # a personal workspace: its owner only, admins included in the refusal
    assert cli("agents", "create", "mine", "--mapping", file, token=writer).code == 0
    for token in (reader, admin_token):
        no = cli("agents", "mapping", "set", "mine@wendy", file, token=token)
        assert no.code == 1 and "[personal-owner-writes]" in no.err
        assert cli("agents", "mapping", "show", "mine@wendy", token=token).code == 0
    assert cli("agents", "mapping", "set", "mine", file, token=writer).code == 0

    anonymous = httpx.get(f"{server.url}/api/workspaces/team/agents/bot/mappings")
    assert anonymous.status_code == 401
