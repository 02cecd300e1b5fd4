"""`evalkit cases mine`: case files from a deployed agent's recent sessions, in bulk, that
lint passes; a second run writes none."""

from __future__ import annotations

from tests.integration.datasets_helpers import Repo, login
from tests.integration.otel_helpers import make_agent
from tests.integration.test_cases_from_session import send, send_to_a_quiet_agent


def test_mine_writes_the_newest_sessions_once(server, cli, admin_token, tmp_path):
    login(cli, server)
    make_agent(server, admin_token, "admin")
    sessions = [f"chat-{n}" for n in range(1, 7)]
    send(server, admin_token, "admin", *sessions)
    suite = Repo(tmp_path / "repo").root / "cases" / "traffic"

    dry = cli("cases", "mine", "--agent", "bot@admin", "--into", str(suite), "--limit", "4",
              "--dry-run", "--json")  # fmt: skip
    assert dry.code == 0, dry.err
    assert len(dry.json["written"]) == 4 and dry.json["dry_run"] is True
    assert not suite.exists() or not list(suite.iterdir())

    mined = cli("cases", "mine", "--agent", "bot@admin", "--into", str(suite), "--limit", "4",
                "--tag", "mined", "--json")  # fmt: skip
    assert mined.code == 0, mined.err
    written = {item["session_id"] for item in mined.json["written"]}
    assert len(written) == 4 and written <= set(sessions)
    files = sorted(p.name for p in suite.iterdir())
    assert files == sorted(f"traffic-{s}.yaml" for s in written)
    text = (suite / files[0]).read_text()
    assert "by `evalkit cases mine`" in text and "mined" in text
    linted = cli("lint", str(suite), "--offline")
    assert linted.code == 0 and "traffic: 4 case files, no problems" in linted.out, linted.out

    rest = cli("cases", "mine", "--agent", "bot@admin", "--into", str(suite), "--json")
    assert rest.code == 0, rest.err
    assert {i["session_id"] for i in rest.json["written"]} == set(sessions) - written
    assert {i["session_id"] for i in rest.json["skipped"]} == written
    again = cli("cases", "mine", "--agent", "bot@admin", "--into", str(suite))
    assert again.code == 0, again.err
    assert "wrote 0 case files, skipped 6" in again.out
    assert len(list(suite.iterdir())) == 6


def test_mine_refuses_bad_input_with_the_fix(server, cli, admin_token, tmp_path):
    login(cli, server)
    make_agent(server, admin_token, "admin")
    suite = tmp_path / "cases" / "traffic"
    bad_since = cli("cases", "mine", "--agent", "bot@admin", "--into", str(suite),
                    "--since", "7 days")  # fmt: skip
    assert bad_since.code == 1 and "--since takes a whole number and a unit" in bad_since.err
    unknown = cli("cases", "mine", "--agent", "ghost@admin", "--into", str(suite))
    assert unknown.code != 0 and "ghost" in unknown.err
    none = cli("cases", "mine", "--agent", "bot@admin", "--into", str(suite), "--since", "1h")
    assert none.code == 0 and "wrote 0 case files, skipped 0" in none.out
    assert not suite.exists()


def test_a_session_that_makes_no_case_is_skipped_with_the_reason(
    server, cli, admin_token, tmp_path
):
    login(cli, server)
    send_to_a_quiet_agent(server, admin_token, "admin", "q1")
    suite = tmp_path / "cases" / "traffic"

    mined = cli("cases", "mine", "--agent", "quiet@admin", "--into", str(suite), "--json")
    assert mined.code == 0, mined.err
    assert mined.json["written"] == []
    [skipped] = mined.json["skipped"]
    assert skipped["session_id"] == "q1"
    assert "session 'q1' of quiet@admin has no user turn with text" in skipped["reason"]
    shown = cli("cases", "mine", "--agent", "quiet@admin", "--into", str(suite))
    assert "skipped session q1: session 'q1' of quiet@admin has no user turn" in shown.out
    assert "wrote 0 case files, skipped 1" in shown.out
