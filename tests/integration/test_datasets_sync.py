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
    assert "uploading fixture 1/1: report" in first.err

    again = cli("sync", str(repo.suite("finance")))
    assert again.code == 0, again.err
    assert "0 added, 0 changed, 2 unchanged, 0 removed, 0 restored" in again.out
    assert "0 fixture(s) uploaded (0.0 MB), 1 already on the server" in again.out
    with psycopg.connect(server.db_url) as conn:
        assert conn.execute("SELECT count(*) FROM case_versions").fetchone()[0] == 2
