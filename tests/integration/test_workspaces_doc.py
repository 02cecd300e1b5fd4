"""Docs that run: docs/workspaces.md's ```sh blocks, in order, through the real CLI against
a real server. Each block starts with ``# as NAME`` (the user who types it) or
``# refused, as NAME`` (each command of the block must exit 1 with the rule named in
its comment).
Users the page adds log in with the password ``evalkit users add`` printed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.integration.datasets_helpers import Repo

DOC = Path(__file__).parents[2] / "docs" / "workspaces.md"
HEAD = re.compile(r"^# (refused, )?as ([\w-]+)$")


def blocks(markdown: str) -> list[tuple[str, bool, list[tuple[str, str]]]]:
    """(user, refused, commands) of each ```sh block, in page order; each command with the
    comment after it (a refused command's comment is the rule that refuses it)."""
    found = []
    for block in re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.M | re.S):
        lines = [line for line in block.splitlines() if line.strip()]
        head = HEAD.match(lines[0])
        assert head, f"a block of docs/workspaces.md starts without '# as NAME': {lines[0]!r}"
        commands = [tuple(p.strip() for p in line.partition("  #")[::2]) for line in lines[1:]]
        found.append((head[2], bool(head[1]), commands))
    return found


def test_the_page_runs_in_order(server, cli, admin_token, api_login, tmp_path):
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "refund", question="How long is the refund window?", answer="30 days")
    repo.case("finance", "revenue", question="Revenue in Q3?", answer="12")
    cli.monkeypatch.chdir(repo.root)
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    tokens = {"admin": admin_token}
    page = blocks(DOC.read_text())
    assert [user for user, _, _ in page][:2] == ["admin", "admin"]
    ran = 0
    for user, refused, commands in page:
        for command, comment in commands:
            words = shlex.split(command)
            assert words[0] == "evalkit", command
            result = cli(*words[1:], token=tokens[user])
            ran += 1
            if refused:
                assert result.code == 1, (command, result.out)
                assert comment and f"[{comment}]" in result.err, (command, result.err)
                continue
            assert result.code == 0, (user, command, result.err)
            if words[1:3] == ["users", "add"]:
                password = re.search(r"password: (\S+)", result.out + result.err)[1]
                tokens[words[3]] = api_login(words[3], password)
    assert ran >= 20

    # what the page says happened
    prod = cli("cases", "show", "refund@prod", "--json", token=tokens["bob"]).json
    assert prod["versions"][0]["review_state"] == "approved"
    assert prod["versions"][0]["promoted_from"] == "refund@dev v1"
    members = cli("workspaces", "members", "list", "dev", "--json", token=tokens["bob"]).json
    assert {m["username"]: m["role"] for m in members} == {
        "alice": "writer",
        "ci-bot": "writer",
        "bob": "reviewer",
    }
    personal = cli("datasets", "show", "finance@alice", "--json", token=tokens["bob"])
    assert personal.code == 0, personal.err
