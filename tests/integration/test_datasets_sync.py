"""Sync through the real CLI against the running edge: versions, removal, fixtures."""

from __future__ import annotations

import psycopg

from tests.integration.datasets_helpers import Repo, login


def test_sync_twice_second_is_a_no_op(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.fixture("report", b"quarterly numbers\n")
    repo.case("finance", "revenue", files="report")
    repo.case("finance", "refund", question="Refund window?", answer="30 days")

    first = cli("sync", str(repo.suite("finance")), "--json")
    assert first.code == 0, first.err
    out = first.json
    assert out["added"] == ["refund", "revenue"] and out["created"] is True
    assert out["fixtures_uploaded"] == 1 and out["workspace"] == "admin"
    assert out["fixtures_on_server"] == 0  # the one used was just uploaded
    assert "uploading fixture 1/1: report" in first.err

    again = cli("sync", str(repo.suite("finance")))
    assert again.code == 0, again.err
    assert "0 added, 0 changed, 2 unchanged, 0 removed, 0 restored" in again.out
    assert "0 fixture(s) uploaded (0.0 MB), 1 already on the server" in again.out
    with psycopg.connect(server.db_url) as conn:
        assert conn.execute("SELECT count(*) FROM case_versions").fetchone()[0] == 2


def _show(cli, ref: str) -> dict:
    result = cli("cases", "show", ref, "--json")
    assert result.code == 0, result.err
    return result.json


def test_edit_remove_readd_keeps_history(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    suite = repo.suite("finance")
    repo.case("finance", "a")
    repo.case("finance", "b")
    assert cli("sync", str(suite), "--branch", "main", "--sha", "1" * 40).code == 0

    repo.case("finance", "a", answer="five")
    (suite / "b.yaml").unlink()
    second = cli("sync", str(suite), "--json", "--branch", "feature", "--sha", "2" * 40)
    assert second.code == 0, second.err
    assert second.json["changed"] == ["a"] and second.json["removed"] == ["b"]

    listed = cli("cases", "list", "finance", "--json").json
    assert [(c["id"], c["version"], c["removed"]) for c in listed] == [
        ("a", 2, False),
        ("b", 1, True),
    ]
    shown = cli("datasets", "show", "finance", "--json").json
    assert shown["cases"] == 1 and shown["review"]["removed"] == 1
    assert shown["last_sync"]["branch"] == "feature" and shown["last_sync"]["sha"] == "2" * 40
    assert shown["last_sync"]["actor"] == "admin"

    repo.case("finance", "b")
    third = cli("sync", str(suite), "--json", "--branch", "main", "--sha", "3" * 40)
    assert third.json["restored"] == ["b"] and third.json["unchanged"] == 1
    b = _show(cli, "b")
    assert [e["kind"] for e in b["events"]] == ["add", "remove", "restore"]
    assert [v["version"] for v in b["versions"]] == [1] and not b["versions"][0]["removed"]
    a = _show(cli, "a")
    assert [v["version"] for v in a["versions"]] == [2, 1]
    assert a["content"]["expected"] == {"answer": "five"}
    assert [(e["kind"], e["branch"]) for e in a["events"]] == [
        ("add", "main"),
        ("change", "feature"),
    ]
    # restored with other content: a new version
    (suite / "b.yaml").unlink()
    cli("sync", str(suite))
    repo.case("finance", "b", answer="changed")
    fourth = cli("sync", str(suite), "--json").json
    assert fourth["restored"] == ["b"]
    assert [v["version"] for v in _show(cli, "b")["versions"]] == [2, 1]
    text = cli("cases", "show", "b")
    assert text.code == 0 and "VERSION" in text.out and "restore" in text.out


def test_branch_and_sha_come_from_git(cli, server, tmp_path):
    import subprocess

    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "a")
    git = ["git", "-C", str(repo.root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", "-b", "topic"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    out = cli("sync", str(repo.suite("finance")), "--json")
    assert out.json["branch"] == "topic" and out.json["sha"] == head.strip()
    table = cli("datasets", "list")
    assert table.out.split("\n")[0].split()[:2] == ["DATASET", "CASES"]
    assert f"topic@{head[:12]} by admin" in table.out
    # A detached HEAD names no branch: the commit alone is recorded.
    subprocess.run([*git, "checkout", "-q", "--detach"], check=True)
    repo.case("finance", "b")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "y"], check=True)
    detached = cli("sync", str(repo.suite("finance")), "--json")
    assert detached.json["branch"] is None and detached.json["sha"] not in (None, head.strip())


def test_the_summary_names_ten_cases_then_counts_the_rest(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    for n in range(12):
        repo.case("many", f"case-{n:02d}")
    result = cli("sync", str(repo.suite("many")))
    assert result.code == 0, result.err
    shown = ", ".join(f"case-{n:02d}" for n in range(10))
    assert f"  added: {shown} and 2 more\n" in result.out


def test_a_suites_warnings_are_shown_and_the_sync_goes_on(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    text = "input:\n  question: q\ntags: [a, a]\nevaluators:\n  exact_match: false\n"
    path = repo.case("tagged", "twice", text=text)
    result = cli("sync", str(repo.suite("tagged")))
    assert result.code == 0, result.err
    assert f"{path}:3: W-TAG-DUPLICATE tag 'a' is listed twice" in result.err
    assert "1 added" in result.out


def test_a_sync_from_a_tree_with_uncommitted_changes_is_marked_dirty(cli, server, tmp_path):
    """The branch and sha of a dirty tree name where it started, not what was synced: the
    sync says so, and so do the dataset and the case history in the CLI and the web UI."""
    import subprocess

    from tests.web.test_pages_http import logged_in

    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.fixture("report", b"v1")
    repo.case("finance", "a")
    (repo.root / "README.md").write_text("not read by a sync\n")
    suite = str(repo.suite("finance"))
    git = ["git", "-C", str(repo.root), "-c", "user.email=t@t", "-c", "user.name=t"]

    def commit() -> str:
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
        return subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()

    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    head = commit()
    clean = cli("sync", suite, "--json")
    assert clean.code == 0, clean.err
    assert (clean.json["sha"], clean.json["dirty"]) == (head, False)

    (repo.root / "README.md").write_text("changed, but nothing the sync reads\n")
    assert cli("sync", suite, "--json").json["dirty"] is False

    repo.case("finance", "a", question="What is 3+3?", answer="6")  # edited, not committed
    dirty = cli("sync", suite)
    assert dirty.code == 0, dirty.err
    marked = f"main@{head[:12]} with uncommitted changes"
    assert f"synced finance@admin from {marked}" in dirty.out
    assert "has uncommitted changes" in dirty.err and "commit them first" in dirty.err
    shown = cli("datasets", "show", "finance", "--json").json["last_sync"]
    assert (shown["sha"], shown["dirty"]) == (head, True)
    assert f"commit {head}, with uncommitted changes" in cli("datasets", "show", "finance").out
    assert f"{marked} by admin" in cli("datasets", "list").out
    history = cli("cases", "show", "a", "--json").json["events"]
    assert [(e["kind"], e["dirty"]) for e in history] == [("add", False), ("change", True)]
    assert marked in cli("cases", "show", "a").out
    with logged_in(server) as web:
        dataset_page = web.get("/w/admin/datasets/finance").text
        assert "with uncommitted changes</span>" in dataset_page
        assert "with uncommitted changes</span>" in web.get("/w/admin").text
        assert (
            "with uncommitted changes</span>" in web.get("/w/admin/datasets/finance/cases/a").text
        )

    head = commit()
    assert cli("sync", suite, "--json").json["dirty"] is False
    with logged_in(server) as web:
        assert "uncommitted changes</span>" not in web.get("/w/admin/datasets/finance").text
    # an untracked case file, and a changed fixture file outside the suite directory
    repo.case("finance", "b")
    assert cli("sync", suite, "--json").json["dirty"] is True
    head = commit()
    (repo.root / "fixtures" / "report.bin").write_bytes(b"v2")
    repo.case("finance", "b", files="report")
    commit()
    (repo.root / "fixtures" / "report.bin").write_bytes(b"v3")
    assert cli("sync", suite, "--json").json["dirty"] is True


def test_changed_fixture_bytes_make_a_new_version(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.fixture("doc", b"version one")
    repo.case("finance", "a", files="doc")
    repo.case("finance", "b")
    assert cli("sync", str(repo.suite("finance"))).code == 0
    repo.fixture("doc", b"version two")
    out = cli("sync", str(repo.suite("finance")), "--json").json
    assert out["changed"] == ["a"] and out["unchanged"] == 1 and out["fixtures_uploaded"] == 1
    versions = _show(cli, "a")["versions"]
    assert versions[0]["fixtures"]["doc"]["sha256"] != versions[1]["fixtures"]["doc"]["sha256"]


def test_fixtures_deduplicated_across_datasets_and_branches(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.fixture("shared", b"same bytes" * 1000)
    repo.fixture("copy", b"same bytes" * 1000, name="copy.bin")
    repo.case("finance", "f1", files="shared")
    repo.case("support", "s1", files="copy")
    first = cli("sync", str(repo.suite("finance")), "--json", "--branch", "main").json
    assert first["fixtures_uploaded"] == 1
    other = cli("sync", str(repo.suite("support")), "--json", "--branch", "dev").json
    assert other["fixtures_uploaded"] == 0 and other["fixtures_on_server"] == 1
    # another branch changes the file: new bytes, new key; the old bytes stay
    repo.fixture("shared", b"other bytes")
    third = cli("sync", str(repo.suite("finance")), "--json", "--branch", "topic").json
    assert third["fixtures_uploaded"] == 1
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute("SELECT sha256, blob_key FROM fixtures ORDER BY size").fetchall()
    assert len(rows) == 2
    blobs = server.settings.data_path / "blobs"
    stored = sorted(p.name for p in blobs.rglob("*") if p.is_file())
    assert stored == sorted(r[0] for r in rows)
    assert all(key.endswith(sha) for sha, key in rows)


def test_sync_into_shared_workspace_and_actor_rules(cli, server, tmp_path, admin_token):
    from tests.integration.datasets_helpers import add_user

    login(cli, server)
    assert cli("workspaces", "create", "dev").code == 0
    writer = add_user(server, admin_token, "wendy", member_of="dev")
    reader = add_user(server, admin_token, "rita")
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "a")
    suite = str(repo.suite("finance"))

    refused = cli("sync", suite, "--workspace", "dev", token=reader)
    assert refused.code == 1
    assert "rita is not a writer of @dev" in refused.err and "[shared-writers-write]" in refused.err
    as_writer = cli("sync", suite, "--workspace", "dev", "--actor", "rita", token=writer)
    assert as_writer.code == 1 and "[admin-only]" in as_writer.err
    nobody = cli("sync", suite, "--workspace", "dev", "--actor", "nobody")
    assert nobody.code == 1 and "[no-such-user]" in nobody.err and "'nobody'" in nobody.err
    ok = cli("sync", suite, "--workspace", "dev", "--json", token=writer)
    assert ok.code == 0 and ok.json["actor"] == "wendy"
    repo.case("finance", "b")
    by_admin = cli("sync", suite, "--workspace", "dev", "--actor", "wendy", "--json")
    assert by_admin.code == 0 and by_admin.json["actor"] == "wendy"
    events = _show(cli, "b@dev")["events"]
    assert events[0]["actor"] == "wendy"
    other = cli("sync", suite, "--workspace", "admin", token=writer)
    assert other.code == 1 and "[personal-owner-writes]" in other.err


def test_sync_is_one_transaction(cli, server, tmp_path):
    """A sync refused half-way (a case id another dataset holds) leaves nothing behind."""
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "shared-id")
    assert cli("sync", str(repo.suite("finance"))).code == 0
    repo.case("support", "fresh")
    repo.case("support", "shared-id")
    refused = cli("sync", str(repo.suite("support")))
    assert refused.code == 1
    assert "shared-id (in finance)" in refused.err and "[case-id-taken]" in refused.err
    with psycopg.connect(server.db_url) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM datasets ORDER BY name")]
        cases = [r[0] for r in conn.execute("SELECT case_id FROM cases")]
    assert names == ["finance"] and cases == ["shared-id"]


def test_overlay_to_a_missing_target_is_refused(cli, server, tmp_path):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "refund")
    repo.case("finance-eu", "refund-eu", text="overlay: refund\nexpected:\n  answer: 14 days\n")
    repo.case("finance-eu", "ghost-eu", text="overlay: ghost\n")
    suite = str(repo.suite("finance-eu"))
    refused = cli("sync", suite)
    assert refused.code == 1
    assert "ghost" in refused.err and "[overlay-target-missing]" in refused.err
    assert cli("sync", str(repo.suite("finance"))).code == 0
    (repo.suite("finance-eu") / "ghost-eu.yaml").unlink()
    ok = cli("sync", suite, "--json")
    assert ok.code == 0, ok.err
    listed = cli("cases", "list", "finance-eu", "--json").json
    assert listed[0]["overlay_target"] == "refund"


def test_lint_and_sync_talk_to_the_server_of_evalkit_yaml(cli, server, tmp_path):
    """evalkit.yaml's server_url beats the server of the last login; EVALKIT_SERVER_URL
    beats both."""
    import json

    from evalkit.cli import credentials

    login(cli, server)
    # the last login's default server is somewhere else (nothing listens on port 9)
    path = credentials.credentials_path()
    stored = json.loads(path.read_text())
    stored["default_server"] = "http://127.0.0.1:9"
    path.write_text(json.dumps(stored))
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "a")
    suite = str(repo.suite("finance"))

    elsewhere = cli("sync", suite)
    assert elsewhere.code == 1 and "cannot reach the evalkit server at http://127.0.0.1:9" in (
        elsewhere.err
    )
    (repo.root / "evalkit.yaml").write_text(f"server_url: {server.url}/\ncases_dir: cases\n")
    synced = cli("sync", suite, "--json")
    assert synced.code == 0, synced.err
    assert synced.json["added"] == ["a"]
    assert f"server {server.url} (server_url of {repo.root / 'evalkit.yaml'}" in synced.err
    linted = cli("lint", suite, "--dataset", "finance@admin")
    assert linted.code == 0 and "no problems" in linted.out, linted.out + linted.err

    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", "http://127.0.0.1:9")
    overridden = cli("lint", suite)
    assert overridden.code == 1 and "http://127.0.0.1:9" in overridden.err
