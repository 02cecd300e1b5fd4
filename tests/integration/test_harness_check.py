"""``evalkit harness check``: against the reference harness and its misbehaving variants,
directly, through the server (shared agents) and from the CLI (personal agents)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evalkit.blobs import signing
from evalkit.harness.check import CHECK_FILE_BYTES, CHECK_FILE_SHA256, check_harness
from evalkit.harness.client import HarnessClient
from evalkit.harness.reference import Behaviour, ReferenceHarness
from evalkit.http1 import Http1Client
from evalkit.model.harness_check import CheckReport
from evalkit.otel.mapping import load_starter
from tests.conftest import start_server
from tests.integration.datasets_helpers import add_user, admin_api, login

KEY = "harness-key-0a1b2c"


async def check(
    behaviour: Behaviour | None = None, *, file_url: str | None = None, timeout: float = 5.0
) -> tuple[CheckReport, ReferenceHarness]:
    with ReferenceHarness(behaviour) as ref:
        async with Http1Client(None, timeout=5.0) as http:
            report = await check_harness(
                HarnessClient(ref.url, None, http), file_url=file_url, timeout=timeout
            )
    return report, ref


def rows(report: CheckReport) -> dict[str, str]:
    return {r.capability: r.result for r in report.rows}


def detail(report: CheckReport, capability: str) -> str:
    return next(r.detail for r in report.rows if r.capability == capability)


@pytest.fixture
def egress_open_server(database_url: str, tmp_path: Path) -> Iterator:
    """A server whose egress policy lets it call harnesses on loopback (the tests' ones)."""

    def configure(settings) -> None:
        settings.egress.allow_private = True

    running = start_server(database_url, tmp_path, configure=configure)
    try:
        yield running
    finally:
        running.stop()


def signed_check_file(server, admin_token: str) -> str:
    admin_api(
        server,
        admin_token,
        "PUT",
        f"/api/workspaces/admin/fixtures/{CHECK_FILE_SHA256}",
        content=CHECK_FILE_BYTES,
    )
    return signing.sign_fixture_url(server.url, CHECK_FILE_SHA256, server.settings.encryption_key)


async def test_the_reference_harness_passes_with_the_file_by_url(server, admin_token):
    report, ref = await check(file_url=signed_check_file(server, admin_token))
    assert report.ok, report.rows
    assert rows(report) == {
        "capabilities": "pass",
        "run": "pass",
        "idempotent start": "pass",
        "accepts.files": "skipped",
        "accepts.file_urls": "pass",
        "accepts.stop": "pass",
        "provides.trajectory": "pass",
        "provides.tool_calls": "pass",
        "provides.thinking": "pass",
        "provides.token_usage": "pass",
        "provides.run_listing": "pass",
        "provides.workspace": "pass",
        "provides.artifacts": "skipped",
    }
    assert "'5" in detail(report, "run") and "evalkit-check.txt" in detail(report, "run")
    assert "by URL" in detail(report, "accepts.file_urls")
    assert "valid ATIF" in detail(report, "provides.trajectory")
    assert ref.counters.runs_created == 2  # the trivial run and the stop run
    assert sum(ref.counters.stops.values()) == 1


async def test_only_inline_files_and_undeclared_capabilities_are_skipped():
    lacks = frozenset({"file_urls", "run_listing", "workspace", "thinking", "stop"})
    report, ref = await check(Behaviour(without=lacks), file_url="http://127.0.0.1:9/never")
    assert report.ok, report.rows
    r = rows(report)
    assert r["accepts.files"] == "pass" and "inline" in detail(report, "accepts.files")
    for name in ("accepts.file_urls", "accepts.stop", "provides.run_listing"):
        assert r[name] == "skipped" and detail(report, name) == "not declared"
    assert r["provides.workspace"] == r["provides.thinking"] == "skipped"
    assert ref.counters.runs_created == 1 and not ref.counters.stops


async def test_a_lying_harness_fails_per_capability():
    report, _ = await check(Behaviour(lie=True))
    assert not report.ok
    r = rows(report)
    assert r["capabilities"] == r["run"] == r["idempotent start"] == "pass"
    assert r["provides.workspace"] == "pass" and r["accepts.files"] == "pass"
    assert r["accepts.stop"] == "fail" and "501" in detail(report, "accepts.stop")
    assert r["provides.trajectory"] == "fail" and "404" in detail(report, "provides.trajectory")
    assert r["provides.run_listing"] == "fail" and "404" in detail(report, "provides.run_listing")
    for name in ("provides.tool_calls", "provides.token_usage"):
        assert r[name] == "fail" and "no valid trajectory" in detail(report, name)


async def test_invalid_atif_failing_runs_and_ignored_stops():
    report, _ = await check(Behaviour(invalid_trajectory=True))
    assert rows(report)["provides.trajectory"] == "fail"
    assert "[step-id-sequence]" in detail(report, "provides.trajectory")

    report, _ = await check(Behaviour(fail_runs=True))
    assert rows(report)["run"] == "fail" and "fails every run" in detail(report, "run")
    assert rows(report)["accepts.files"] == "fail"
    assert rows(report)["provides.trajectory"] == "pass"  # a failed run has a trajectory too

    report, _ = await check(Behaviour(run_seconds=math.inf, ignore_stop=True), timeout=0.5)
    r = rows(report)
    assert r["run"] == "fail" and "still running after 0.5 s" in detail(report, "run")
    assert r["accepts.stop"] == "fail" and "after the stop" in detail(report, "accepts.stop")

    report, _ = await check(Behaviour(run_seconds=math.inf), timeout=0.5)
    assert rows(report)["accepts.stop"] == "pass"


async def test_a_harness_that_is_down():
    async with Http1Client(None, timeout=2.0, connect_timeout=2.0) as http:
        report = await check_harness(HarnessClient("http://127.0.0.1:9", None, http))
    assert not report.ok
    assert [r.capability for r in report.rows] == ["capabilities"]
    assert "cannot connect" in report.rows[0].detail


def test_shared_agents_are_checked_by_the_server(egress_open_server, cli, tmp_path):
    server = egress_open_server
    login(cli, server)
    token = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "admin", "password": "admin-password-1"}
    ).json()["token"]
    assert cli("workspaces", "create", "dev").code == 0
    cli.monkeypatch.setenv("REF_KEY", KEY)
    with (
        ReferenceHarness(api_key=KEY) as good,
        ReferenceHarness(Behaviour(lie=True), api_key=KEY) as liar,
    ):
        for name, ref in (("good", good), ("liar", liar)):
            created = cli(
                "agents", "create", f"{name}@dev", "--harness-url", ref.url,
                "--api-key-env", "REF_KEY",
            )  # fmt: skip
            assert created.code == 0, created.err
        passed = cli("harness", "check", "good@dev", "--json")
        assert passed.code == 0, passed.err
        report = passed.json
        assert report["ok"] and report["agent"] == "good@dev"
        assert {r["capability"]: r["result"] for r in report["rows"]}["accepts.file_urls"] == "pass"
        # The server sent the stored key and a signed URL of its own.
        assert good.counters.calls["capabilities"] == 1 and good.counters.runs_created == 2

        table = cli("harness", "check", "liar@dev", "--timeout", "5")
        assert table.code == 1
        lines = {line.split()[0]: line for line in table.out.splitlines() if line.strip()}
        assert "FAIL" in lines["accepts.stop"] and "PASS" in lines["run"]
        assert "FAIL" in lines["provides.trajectory"] and "SKIPPED" in lines["provides.artifacts"]
        assert table.out.rstrip().endswith("6 check(s) failed")

        # Only the workspace's writers and admins check its agents.
        alice = add_user(server, token, "alice")
        refused = cli("harness", "check", "good@dev", token=alice)
        assert refused.code == 1 and "[shared-writers-write]" in refused.err
        r = httpx.post(
            f"{server.url}/api/workspaces/dev/agents/good/check",
            json={},
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "shared-writers-write"


def test_personal_agents_are_checked_by_their_owner_cli(server, cli):
    login(cli, server)
    token = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "admin", "password": "admin-password-1"}
    ).json()["token"]
    with ReferenceHarness(api_key=KEY) as ref:
        cli.monkeypatch.setenv("MY_KEY", KEY)
        created = cli(
            "agents", "create", "mine", "--harness-url", ref.url, "--api-key-env", "MY_KEY"
        )
        assert created.code == 0, created.err
        result = cli("harness", "check", "mine", "--json")
        assert result.code == 0, (result.out, result.err)
        rows_ = {r["capability"]: r["result"] for r in result.json["rows"]}
        assert result.json["agent"] == "mine@admin" and result.json["ok"]
        assert rows_["accepts.file_urls"] == "pass"  # uploaded and signed by the server
        assert ref.counters.runs_created == 2

        cli.monkeypatch.delenv("MY_KEY")
        missing = cli("harness", "check", "mine")
        assert missing.code == 1 and "MY_KEY" in missing.err

        # Nobody else checks it, from the CLI or through the server.
        bob = add_user(server, token, "bob")
        refused = cli("harness", "check", "mine@admin", token=bob)
        assert refused.code == 1 and "[personal-agent-owner-only]" in refused.err
        r = httpx.post(
            f"{server.url}/api/workspaces/admin/agents/mine/check",
            json={},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "server-cannot-drive-personal-agent"


def test_code_driven_agents_have_no_harness_to_check(server, cli, tmp_path):
    login(cli, server)
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps(load_starter("openinference")))
    assert cli("agents", "create", "traced", "--mapping", str(mapping)).code == 0
    result = cli("harness", "check", "traced")
    assert result.code == 1 and "no harness" in result.err
    assert cli("harness", "check", "nope").code == 1
    assert cli("harness", "check", "traced", "--timeout", "0").code == 2


def test_personal_check_sends_the_file_inline_or_fails_a_liar_with_exit_1(server, cli):
    """From the owner's CLI: a harness that takes only inline files gets the check's file
    inline (accepts.files passes); a harness that lies gets FAIL rows and exit 1."""
    login(cli, server)
    with (
        ReferenceHarness(Behaviour(without=frozenset({"file_urls"}))) as inline,
        ReferenceHarness(Behaviour(lie=True)) as liar,
    ):
        for name, ref in (("inline", inline), ("liar", liar)):
            assert cli("agents", "create", name, "--harness-url", ref.url).code == 0
        passed = cli("harness", "check", "inline", "--json")
        assert passed.code == 0, (passed.out, passed.err)
        results = {r["capability"]: r for r in passed.json["rows"]}
        assert results["accepts.files"]["result"] == "pass"
        assert "inline" in results["accepts.files"]["detail"]
        assert results["accepts.file_urls"]["result"] == "skipped"

        failed = cli("harness", "check", "liar", "--timeout", "5")
        assert failed.code == 1
        lines = {line.split()[0]: line for line in failed.out.splitlines() if line.strip()}
        assert "FAIL" in lines["accepts.stop"] and "FAIL" in lines["provides.run_listing"]
        assert "PASS" in lines["capabilities"]
        assert failed.out.rstrip().endswith("check(s) failed")
