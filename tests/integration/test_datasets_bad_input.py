"""Bad input: each refused with the file, the line and the fix, by lint and by sync."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.datasets_helpers import Repo, login


def test_broken_yaml_reports_the_line(cli, server, tmp_path):
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "ok")
    repo.case("finance", "broken", text="input:\n  question: [unclosed\nexpected: {}\n")
    lint = cli("lint", str(repo.suite("finance")), "--offline")
    assert lint.code == 1
    line = next(x for x in lint.out.splitlines() if "E-YAML" in x)
    assert line.split(": ")[0].endswith(("broken.yaml:2", "broken.yaml:3")), line
    assert lint.out.splitlines()[-1] == "finance: 1 error, 0 warnings in 2 case files"
    login(cli, server)
    sync = cli("sync", str(repo.suite("finance")))
    assert sync.code == 1 and "E-YAML" in sync.err and "fix the errors above" in sync.err


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("input: [1, 2]\n", "E-SCHEMA-TYPE"),
        ("input:\n  q: x\ntags: 5\n", "E-SCHEMA-TYPE"),
        ("input:\n  q: x\ncolour: red\n", "E-SCHEMA-UNKNOWN-KEY"),
        ("input:\n  q: x\nevaluators:\n  exact_matsh: true\n", "E-EVALUATOR-UNKNOWN"),
    ],
)
def test_wrong_types_and_unknown_keys(cli, tmp_path, text, code):
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "c", text=text)
    lint = cli("lint", str(repo.suite("finance")), "--offline")
    assert lint.code == 1 and code in lint.out, lint.out
    assert "c.yaml:" in lint.out


def test_duplicate_ids(cli, tmp_path):
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "one", text="id: same\ninput:\n  q: x\n")
    repo.case("finance", "two", text="id: same\ninput:\n  q: y\n")
    lint = cli("lint", str(repo.suite("finance")), "--offline", "--json")
    assert lint.code == 1
    codes = [f["code"] for f in lint.json["findings"]]
    assert codes == ["E-CASE-ID-DUPLICATE"]


def test_missing_fixture_file_and_unknown_key(cli, tmp_path):
    repo = Repo(tmp_path / "repo")
    repo.fixtures["gone"] = "fixtures/gone.pdf"
    repo.write_project()
    repo.case("finance", "a", files="gone")
    repo.case("finance", "b", files="nokey")
    lint = cli("lint", str(repo.suite("finance")), "--offline")
    assert lint.code == 1
    assert "E-FIXTURE-MISSING" in lint.out and "E-FIXTURE-UNKNOWN" in lint.out


def test_path_escaping_the_suite_directory(cli, server, tmp_path):
    repo = Repo(tmp_path / "repo")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    repo.fixtures["secret"] = "../secret.txt"
    repo.write_project()
    repo.case("finance", "a", files="secret")
    (repo.suite("finance") / "linked.yaml").symlink_to(outside)
    lint = cli("lint", str(repo.suite("finance")), "--offline")
    assert lint.code == 1
    assert lint.out.count("E-PATH-ESCAPE") == 2
    login(cli, server)
    assert cli("sync", str(repo.suite("finance"))).code == 1


def test_a_case_file_instead_of_the_suite_directory(cli, tmp_path):
    """Not read as evalkit.yaml (which reported its keys as unknown project keys)."""
    repo = Repo(tmp_path / "repo")
    case = repo.case("finance", "a")
    for args in (("lint", str(case), "--offline"), ("sync", str(case))):
        result = cli(*args)
        assert result.code == 1, result.err
        assert f"{case} is a file: give the suite directory that holds it" in result.err
        assert "E-SCHEMA-UNKNOWN-KEY" not in result.err


def test_fixture_over_the_local_limit(cli, tmp_path):
    repo = Repo(tmp_path / "repo")
    repo.max_fixture_bytes = 1000
    repo.fixture("big", b"x" * 1001)
    repo.case("finance", "a", files="big")
    lint = cli("lint", str(repo.suite("finance")), "--offline")
    assert lint.code == 1 and "E-FIXTURE-TOO-LARGE" in lint.out


def test_50_mb_fixture_streams_and_the_server_cap_is_413(cli, server, tmp_path, admin_token):
    login(cli, server)
    repo = Repo(tmp_path / "repo")
    big = repo.fixture("video", b"")
    with open(big, "wb") as f:
        f.truncate(50_000_000)  # sparse: 50 MB of zeros without writing them
    repo.case("finance", "a", files="video")
    server.settings.max_fixture_bytes = 8 * 2**20
    refused = cli("sync", str(repo.suite("finance")))
    assert refused.code == 1
    assert "over this server's limit of 8388608 bytes" in refused.err
    assert "[fixture-too-large]" in refused.err
    # without Content-Length the stream is cut at the cap
    sha = "0" * 64
    r = httpx.put(
        f"{server.url}/api/workspaces/admin/fixtures/{sha}",
        content=iter([b"y" * 2**20] * 9),
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert r.status_code == 413
    server.settings.max_fixture_bytes = 64 * 2**20
    ok = cli("sync", str(repo.suite("finance")), "--json")
    assert ok.code == 0, ok.err
    assert ok.json["fixture_bytes_uploaded"] == 50_000_000


def test_upload_with_wrong_sha256_is_refused(server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    r = httpx.put(
        f"{server.url}/api/workspaces/admin/fixtures/{'a' * 64}", content=b"hi", headers=auth
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "sha256-mismatch"
    r = httpx.put(f"{server.url}/api/workspaces/admin/fixtures/NOTHEX", content=b"hi", headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-sha256"


def test_sync_body_validation(server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    url = f"{server.url}/api/workspaces/admin/datasets/finance/sync"
    dup = {"cases": [{"id": "a", "content": {}}, {"id": "a", "content": {}}]}
    r = httpx.post(url, json=dup, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "duplicate-case-id"
    pins = {"cases": [{"id": "a", "content": {"input": {"files": ["k"]}}}]}
    r = httpx.post(url, json=pins, headers=auth)
    assert r.status_code == 400 and "must pin exactly" in r.json()["error"]["message"]
    unknown = {
        "cases": [
            {
                "id": "a",
                "content": {"input": {"files": ["k"]}},
                "fixtures": {"k": {"sha256": "b" * 64, "size": 1}},
            }
        ]
    }
    r = httpx.post(url, json=unknown, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "fixture-missing"
    r = httpx.post(url, json={"cases": [{"id": "bad id!", "content": {}}]}, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-case-id"
    r = httpx.post(
        f"{server.url}/api/workspaces/admin/datasets/Bad Name/sync",
        json={"cases": []},
        headers=auth,
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-name"
