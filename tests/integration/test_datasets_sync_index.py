"""Sync with the local index (the real CLI against the running edge): a re-sync parses only
what changed and names unchanged cases by hash, and the server's answer is always the one a
sync without any index would give."""

from __future__ import annotations

import shutil

import httpx
import psycopg
import pytest

from tests.integration.datasets_helpers import Repo, login


def synced(cli, suite, *args: str) -> dict:
    result = cli("sync", str(suite), "--json", *args)
    assert result.code == 0, result.err
    return result.json


def current(cli, case_ref: str) -> dict:
    shown = cli("cases", "show", case_ref, "--json")
    assert shown.code == 0, shown.err
    return shown.json


def index_files(tmp_path):
    return list((tmp_path / "cache" / "sync").glob("*.index"))


@pytest.fixture
def repo(cli, server, tmp_path) -> Repo:
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.fixture("report", b"quarterly numbers\n")
    repo.case("finance", "a", files="report")
    repo.case("finance", "b", question="Refund window?", answer="30 days")
    repo.case("finance", "c")
    return repo


def test_a_re_sync_parses_nothing_and_sends_cases_by_hash(cli, repo, server):
    suite = repo.suite("finance")
    first = synced(cli, suite)
    assert first["added"] == ["a", "b", "c"] and first["known"] == 0
    assert first["case_files_parsed"] == 3
    again = cli("sync", str(suite), "--json")
    out = again.json
    assert out["unchanged"] == 3 and out["known"] == 3 and out["case_files_parsed"] == 0
    assert out["fixtures_uploaded"] == 0 and out["fixtures_on_server"] == 1
    assert "sending 0 cases, 3 more by hash" in again.err
    text = cli("sync", str(suite))
    assert "0 added, 0 changed, 3 unchanged, 0 removed, 0 restored" in text.out
    assert "0 fixture(s) uploaded (0.0 MB), 1 already on the server" in text.out
    with psycopg.connect(server.db_url) as conn:
        assert conn.execute("SELECT count(*) FROM case_versions").fetchone()[0] == 3


def test_edits_and_deletions_in_a_git_tree(cli, repo):
    """Edited cases go in full and the rest by hash; a deleted file removes its case; git
    still decides whether the sync is marked dirty."""
    import subprocess

    git = ["git", "-C", str(repo.root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    suite = repo.suite("finance")
    assert synced(cli, suite)["dirty"] is False
    assert synced(cli, suite)["dirty"] is False

    repo.case("finance", "b", question="Refund window?", answer="14 days")
    out = synced(cli, suite)
    assert out["changed"] == ["b"] and out["unchanged"] == 2 and out["known"] == 2
    assert out["case_files_parsed"] == 1 and out["dirty"] is True
    assert current(cli, "b")["content"]["expected"] == {"answer": "14 days"}

    (suite / "c.yaml").unlink()
    out = synced(cli, suite)
    assert out["removed"] == ["c"] and out["unchanged"] == 2 and out["known"] == 2

    subprocess.run([*git, "checkout", "-q", "--", "."], check=True)
    out = synced(cli, suite)
    assert out["changed"] == ["b"] and out["restored"] == ["c"] and out["known"] == 1
    assert out["dirty"] is False
    assert current(cli, "b")["content"]["expected"] == {"answer": "30 days"}


def test_a_changed_fixture_makes_its_cases_changed(cli, repo):
    suite = repo.suite("finance")
    synced(cli, suite)
    repo.fixture("report", b"quarterly NUMBERS\n")  # the same size
    out = synced(cli, suite)
    assert out["changed"] == ["a"] and out["known"] == 2 and out["fixtures_uploaded"] == 1
    assert out["case_files_parsed"] == 0
    versions = current(cli, "a")["versions"]
    assert (
        versions[0]["fixtures"]["report"]["sha256"] != versions[1]["fixtures"]["report"]["sha256"]
    )
    context = repo.root / "evalkit.yaml"
    context.write_text(
        context.read_text().replace(
            "report: fixtures/report.bin",
            "report: {path: fixtures/report.bin, context: The Q3 report.}",
        )
    )
    out = synced(cli, suite)
    assert out["changed"] == ["a"] and out["known"] == 2


def test_a_corrupt_index_is_rebuilt_and_the_sync_is_right(cli, repo, tmp_path):
    suite = repo.suite("finance")
    synced(cli, suite)
    (files,) = index_files(tmp_path)
    files.write_bytes(b"\x00" * 100)
    repo.case("finance", "b", answer="changed")
    out = synced(cli, suite)
    assert out["changed"] == ["b"] and out["unchanged"] == 2
    assert out["known"] == 0 and out["case_files_parsed"] == 3  # nothing taken from it
    assert synced(cli, suite)["known"] == 3


def test_two_workspaces_each_get_what_they_lack(cli, repo):
    suite = repo.suite("finance")
    assert cli("workspaces", "create", "dev").code == 0
    synced(cli, suite)
    to_dev = synced(cli, suite, "--workspace", "dev")
    assert to_dev["added"] == ["a", "b", "c"] and to_dev["known"] == 0
    repo.case("finance", "c", answer="five")
    mine = synced(cli, suite)
    assert mine["changed"] == ["c"] and mine["known"] == 2
    dev = synced(cli, suite, "--workspace", "dev")
    assert dev["changed"] == ["c"] and dev["known"] == 2
    assert current(cli, "c@dev")["content"] == current(cli, "c")["content"]


def test_a_dataset_changed_by_another_sync_is_never_taken_as_unchanged(cli, repo, tmp_path):
    """Another checkout syncs other content (and drops a case) into the same dataset: this
    directory's record of the server is stale, the server refuses its hashes, and the CLI
    sends the cases in full, so the dataset ends up as this directory says."""
    suite = repo.suite("finance")
    synced(cli, suite)
    other = Repo(tmp_path / "other")
    shutil.copytree(repo.root, other.root, dirs_exist_ok=True)
    other.case("finance", "b", answer="other content")
    (other.suite("finance") / "c.yaml").unlink()
    theirs = synced(cli, other.suite("finance"))
    assert theirs["changed"] == ["b"] and theirs["removed"] == ["c"]

    again = cli("sync", str(suite), "--json")
    assert again.code == 0, again.err
    assert "finance@admin changed on the server since the last sync from here" in again.err
    out = again.json
    assert out["changed"] == ["b"] and out["restored"] == ["c"] and out["unchanged"] == 1
    assert out["known"] == 0
    assert current(cli, "b")["content"]["expected"] == {"answer": "30 days"}
    assert synced(cli, suite)["known"] == 3


# ------------------------------------------------------------------ the API, by hash


def _sync(server, token: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/workspaces/admin/datasets/finance/sync",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    )


def _hashes(server) -> dict[str, str]:
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute(
            "SELECT c.case_id, v.version_hash FROM cases c JOIN case_versions v "
            "ON v.case_pk = c.id AND v.version = c.current_version"
        ).fetchall()
    return dict(rows)


def test_the_server_refuses_a_hash_that_is_not_its_current_version(cli, repo, server, admin_token):
    synced(cli, repo.suite("finance"))
    hashes = _hashes(server)
    known = [{"id": cid, "version_hash": digest} for cid, digest in sorted(hashes.items())]
    ok = _sync(server, admin_token, {"cases": [], "known": known})
    assert ok.status_code == 200, ok.text
    assert ok.json()["unchanged"] == 3 and ok.json()["known"] == 3 and not ok.json()["removed"]

    wrong = [*known[:2], {"id": "c", "version_hash": "0" * 64}]
    ghost = [*known, {"id": "ghost", "version_hash": "0" * 64}]
    for body in ({"cases": [], "known": wrong}, {"cases": [], "known": ghost}):
        refused = _sync(server, admin_token, body)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "known-case-stale" and "finance@admin" in error["message"]
    twice = _sync(server, admin_token, {"cases": [{"id": "a", "content": {}}], "known": known})
    assert twice.status_code == 400 and twice.json()["error"]["code"] == "duplicate-case-id"
    bad = _sync(server, admin_token, {"cases": [], "known": [{"id": "a", "version_hash": "x"}]})
    assert bad.status_code == 400
    assert _hashes(server) == hashes


def test_cases_sent_by_hash_keep_their_overlay_and_evaluator_checks(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "refund")
    repo.case("finance-eu", "refund-eu", text="overlay: refund\nexpected:\n  answer: 14 days\n")
    repo.case(
        "finance-eu", "graded", text="input: {q: x}\nevaluators:\n  custom: {house-style: {}}\n"
    )
    synced(cli, repo.suite("finance"))
    assert synced(cli, repo.suite("finance-eu"))["unknown_custom_evaluators"] == ["house-style"]
    again = synced(cli, repo.suite("finance-eu"))
    assert again["known"] == 2 and again["unknown_custom_evaluators"] == ["house-style"]
    (repo.suite("finance") / "refund.yaml").unlink()
    assert synced(cli, repo.suite("finance"))["removed"] == ["refund"]
    refused = cli("sync", str(repo.suite("finance-eu")))
    assert refused.code == 1 and "[overlay-target-missing]" in refused.err
