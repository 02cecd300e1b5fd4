"""Review rules per role, comments, promotion end to end, and online lint."""

from __future__ import annotations

import httpx

from tests.integration.datasets_helpers import Repo, add_user, login


def _setup(cli, server, tmp_path, admin_token):
    login(cli, server)
    for ws in ("dev", "prod"):
        assert cli("workspaces", "create", ws).code == 0
    tokens = {
        "writer": add_user(server, admin_token, "wendy", member_of="dev"),
        "reviewer": add_user(server, admin_token, "rob", member_of="dev", role="reviewer"),
        "outsider": add_user(server, admin_token, "olga"),
    }
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "refund", question="Refund window?", answer="30 days")
    repo.case("finance", "revenue")
    repo.case("finance-eu", "refund-eu", text="overlay: refund\nexpected:\n  answer: 14 days\n")
    for suite in ("finance", "finance-eu"):
        result = cli("sync", str(repo.suite(suite)), "--workspace", "dev", token=tokens["writer"])
        assert result.code == 0, result.err
    return repo, tokens


def test_review_rules_per_role(cli, server, tmp_path, admin_token):
    repo, tokens = _setup(cli, server, tmp_path, admin_token)
    writer = cli("cases", "approve", "revenue@dev", token=tokens["writer"])
    assert writer.code == 1
    assert "wendy is not a reviewer of @dev" in writer.err and "[reviewers-review]" in writer.err
    outsider = cli("cases", "reject", "revenue@dev", token=tokens["outsider"])
    assert outsider.code == 1 and "[reviewers-review]" in outsider.err

    rejected = cli(
        "cases",
        "reject",
        "revenue@dev",
        "--comment",
        "ambiguous",
        "--json",
        token=tokens["reviewer"],
    )
    assert rejected.code == 0, rejected.err
    assert rejected.json["review_state"] == "rejected" and rejected.json["promoted"] == []
    commented = cli("cases", "comment", "revenue@dev", "why ambiguous?", token=tokens["outsider"])
    assert commented.code == 0 and "commented on revenue@dev" in commented.out

    shown = cli("cases", "show", "revenue@dev", "--json").json
    assert [(e["kind"], e["actor"], e["comment"]) for e in shown["events"]] == [
        ("add", "wendy", None),
        ("reject", "rob", "ambiguous"),
        ("comment", "olga", "why ambiguous?"),
    ]
    ds = cli("datasets", "show", "finance@dev", "--json").json
    assert ds["review"] == {"pending": 1, "approved": 0, "rejected": 1, "removed": 0}
    text = cli("datasets", "show", "finance@dev")
    assert "review: 1 pending, 0 approved, 1 rejected; 0 removed" in text.out

    # no review in personal workspaces, even for the owner or an admin
    repo.case("mine", "m1")
    assert cli("sync", str(repo.suite("mine")), token=tokens["writer"]).code == 0
    personal = cli("cases", "approve", "m1@wendy", token=tokens["writer"])
    assert personal.code == 1 and "[no-review-in-personal]" in personal.err
    assert cli("cases", "approve", "m1@wendy").code == 1
    # but comments are fine there
    assert cli("cases", "comment", "m1@wendy", "nice", token=tokens["outsider"]).code == 0

    missing = cli("cases", "approve", "nope@dev", token=tokens["reviewer"])
    assert missing.code == 1 and "[no-such-case]" in missing.err
    bad_version = cli("cases", "approve", "revenue@dev", "--version", "7", token=tokens["reviewer"])
    assert bad_version.code == 1 and "no version 7" in bad_version.err


def test_promotion_end_to_end(cli, server, tmp_path, admin_token):
    repo, tokens = _setup(cli, server, tmp_path, admin_token)
    assert cli("workspaces", "promote-to", "dev", "prod").code == 0

    missing = cli("cases", "approve", "refund@dev", token=tokens["reviewer"])
    assert missing.code == 1
    assert "evalkit datasets create finance@prod" in missing.err
    assert "[promotion-dataset-missing]" in missing.err
    # nothing was changed by the refused approval
    assert cli("cases", "show", "refund@dev", "--json").json["versions"][0]["review_state"] == (
        "pending"
    )

    assert cli("datasets", "create", "finance@prod").code == 0
    assert cli("datasets", "create", "finance-eu@prod").code == 0
    # An empty target is filled by approving in its source, not by a sync it would refuse.
    assert cli("agents", "create", "mine", "--mapping", "openinference").code == 0
    empty = httpx.post(
        server.url + "/api/experiments",
        headers={"Authorization": f"Bearer {admin_token}"},
        json={"dataset": "finance@prod", "agent": "mine", "sdk": True},
    )
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "no-cases"
    message = empty.json()["error"]["message"]
    assert "sync" not in message and "`evalkit cases approve CASE_ID@dev`" in message
    approved = cli("cases", "approve", "refund@dev", "--comment", "good", token=tokens["reviewer"])
    assert approved.code == 0, approved.err
    assert "approved refund@dev v1" in approved.out
    assert "promoted refund to finance@prod (v1, approved)" in approved.out
    assert "promoted refund-eu to finance-eu@prod (v1, approved)" in approved.out

    prod = cli("cases", "show", "refund@prod", "--json").json
    assert prod["versions"][0]["review_state"] == "approved"
    assert prod["versions"][0]["promoted_from"] == "refund@dev v1"
    assert prod["events"][0]["kind"] == "promotion" and prod["events"][0]["actor"] == "rob"
    overlay = cli("cases", "show", "refund-eu@prod", "--json").json
    assert overlay["content"]["overlay"] == "refund"
    assert overlay["versions"][0]["review_state"] == "approved"

    # prod refuses sync and review decisions, accepts comments
    refused = cli("sync", str(repo.suite("finance")), "--workspace", "prod")
    assert refused.code == 1 and "[promotion-target-no-sync]" in refused.err
    no_review = cli("cases", "reject", "refund@prod")
    assert no_review.code == 1 and "[promotion-target-no-review]" in no_review.err
    assert cli("cases", "comment", "refund@prod", "ship it", token=tokens["outsider"]).code == 0

    # approving again is idempotent in prod; a changed case promotes as a new version
    assert cli("cases", "approve", "refund@dev", token=tokens["reviewer"]).code == 0
    assert [
        v["version"] for v in cli("cases", "show", "refund@prod", "--json").json["versions"]
    ] == [1]
    repo.case("finance", "refund", question="Refund window?", answer="60 days")
    assert cli("sync", str(repo.suite("finance")), "--workspace", "dev").code == 0
    again = cli("cases", "approve", "refund@dev", "--json", token=tokens["reviewer"]).json
    assert again["version"] == 2
    assert [(p["case"], p["version"]) for p in again["promoted"]] == [
        ("refund", 2),
        ("refund-eu", 1),
    ]
    prod_ds = cli("datasets", "list", "--workspace", "prod", "--json").json
    assert [(d["name"], d["review"]["approved"]) for d in prod_ds] == [
        ("finance", 1),
        ("finance-eu", 1),
    ]
    # revenue was never approved: not in prod
    prod_cases = cli("cases", "list", "finance@prod", "--json").json
    assert [c["id"] for c in prod_cases] == ["refund"]


def test_datasets_create_rules(cli, server, tmp_path, admin_token):
    login(cli, server)
    assert cli("workspaces", "create", "dev").code == 0
    outsider = add_user(server, admin_token, "olga")
    refused = cli("datasets", "create", "finance@dev", token=outsider)
    assert refused.code == 1 and "[shared-writers-write]" in refused.err
    mine = cli("datasets", "create", "scratch", token=outsider)
    assert mine.code == 0 and "created dataset scratch@olga" in mine.out
    dup = cli("datasets", "create", "scratch@olga", token=outsider)
    assert dup.code == 1 and "[dataset-exists]" in dup.err
    bad = cli("datasets", "create", "Bad Name@dev")
    assert bad.code == 1 and "[bad-name]" in bad.err
    none = cli("datasets", "show", "nothing@dev")
    assert none.code == 1 and "[no-such-dataset]" in none.err
    ws = cli("datasets", "show", "x@nowhere")
    assert ws.code == 1 and "[no-such-workspace]" in ws.err


def test_lint_online(cli, server, tmp_path, admin_token):
    repo, tokens = _setup(cli, server, tmp_path, admin_token)
    repo.case("support", "refund", text="input:\n  q: dup\n")
    repo.case("support", "eu2", text="overlay: nothing-here\n")
    repo.case(
        "support",
        "graded",
        text="input:\n  q: x\nevaluators:\n  custom:\n    citation_check: {min: 2}\n",
    )
    suite = str(repo.suite("support"))

    offline = cli("lint", suite, "--offline")
    assert offline.code == 0 and "E-CASE-ID-TAKEN" not in offline.out

    online = cli("lint", suite, "--dataset", "support@dev", token=tokens["writer"])
    assert online.code == 1
    lines = online.out.splitlines()
    taken = next(x for x in lines if "E-CASE-ID-TAKEN" in x)
    assert "refund.yaml:1:" in taken and "finance@dev" in taken
    target = next(x for x in lines if "E-OVERLAY-TARGET" in x)
    assert "eu2.yaml:1:" in target and "'nothing-here'" in target
    custom = next(x for x in lines if "W-CUSTOM-UNKNOWN" in x)
    assert "graded.yaml:" in custom and "citation_check" in custom
    assert lines[-1] == "support: 2 errors, 1 warning in 3 case files"

    # the suite's own dataset does not clash with itself
    own = cli("lint", str(repo.suite("finance")), "--dataset", "finance@dev", "--json")
    assert own.code == 0 and own.json["errors"] == 0
    # overlays to live cases of other datasets pass
    eu = cli("lint", str(repo.suite("finance-eu")), "--dataset", "finance-eu@dev")
    assert eu.code == 0, eu.out
    # without --dataset only the custom evaluator check runs (personal workspace)
    plain = cli("lint", suite, token=tokens["writer"])
    assert plain.code == 0 and "W-CUSTOM-UNKNOWN" in plain.out
    # sync warns too
    (repo.suite("support") / "refund.yaml").unlink()
    (repo.suite("support") / "eu2.yaml").unlink()
    synced = cli("sync", suite, "--workspace", "dev", token=tokens["writer"])
    assert synced.code == 0 and "W-CUSTOM-UNKNOWN" in synced.err

    logged_out = cli("lint", suite, "--dataset", "support@dev")
    cli("logout")
    needs_login = cli("lint", suite)
    assert logged_out.code == 0
    assert needs_login.code == 1 and "not logged in" in needs_login.err


def test_custom_unknown_warns_only_for_names_without_a_remote_evaluator(cli, server, tmp_path):
    """Lint and sync ask the workspace which custom names are registered remote evaluators."""
    login(cli, server)
    assert cli("workspaces", "create", "dev").code == 0
    made = cli("evaluators", "create", "citations@dev", "--endpoint", "http://203.0.113.10:8700")
    assert made.code == 0, made.err
    repo = Repo(tmp_path / "repo")
    repo.case(
        "graded",
        "g1",
        text="input:\n  q: x\nevaluators:\n  custom:\n    citations: {min: 2}\n"
        "    tone: {style: formal}\n",
    )
    suite = str(repo.suite("graded"))

    online = cli("lint", suite, "--dataset", "graded@dev", "--json")
    assert online.code == 0, online.out
    warned = [f for f in online.json["findings"] if f["code"] == "W-CUSTOM-UNKNOWN"]
    assert len(warned) == 1 and "'tone'" in warned[0]["message"], warned
    assert warned[0]["line"] == 6
    # @dev's evaluator is unknown to the personal workspace: both names warn there
    personal = cli("lint", suite, "--json")
    assert [f["code"] for f in personal.json["findings"]] == ["W-CUSTOM-UNKNOWN"] * 2

    synced = cli("sync", suite, "--workspace", "dev", "--json")
    assert synced.code == 0, synced.err
    assert synced.json["unknown_custom_evaluators"] == ["tone"]
    assert "'tone'" in synced.err and "'citations'" not in synced.err
    # once registered, neither lint nor sync warns
    assert (
        cli("evaluators", "create", "tone@dev", "--endpoint", "http://203.0.113.10:8700").code == 0
    )
    clean = cli("lint", suite, "--dataset", "graded@dev")
    assert clean.code == 0 and "W-CUSTOM-UNKNOWN" not in clean.out, clean.out
    again = cli("sync", suite, "--workspace", "dev")
    assert again.code == 0 and "W-CUSTOM-UNKNOWN" not in again.err, again.err


def test_promotion_takes_only_live_not_rejected_overlays(cli, server, tmp_path, admin_token):
    repo, tokens = _setup(cli, server, tmp_path, admin_token)
    assert cli("workspaces", "promote-to", "dev", "prod").code == 0
    for suite, case_id in (("finance-uk", "refund-uk"), ("finance-us", "refund-us")):
        repo.case(suite, case_id, text="overlay: refund\nexpected:\n  answer: 28 days\n")
        synced = cli("sync", str(repo.suite(suite)), "--workspace", "dev", token=tokens["writer"])
        assert synced.code == 0, synced.err
    for name in ("finance", "finance-eu", "finance-uk", "finance-us"):
        assert cli("datasets", "create", f"{name}@prod").code == 0
    rejected = cli("cases", "reject", "refund-uk@dev", token=tokens["reviewer"])
    assert rejected.code == 0, rejected.err
    (repo.suite("finance-us") / "refund-us.yaml").unlink()
    removed = cli("sync", str(repo.suite("finance-us")), "--workspace", "dev", "--json")
    assert removed.json["removed"] == ["refund-us"]

    approved = cli("cases", "approve", "refund@dev", "--json", token=tokens["reviewer"])
    assert approved.code == 0, approved.err
    assert [(p["case"], p["dataset"]) for p in approved.json["promoted"]] == [
        ("refund", "finance"),
        ("refund-eu", "finance-eu"),
    ]
    for name in ("finance-uk", "finance-us"):
        assert cli("cases", "list", f"{name}@prod", "--json").json == []


def test_review_never_filters_a_run_and_removed_cases_stay_pinned(database_url, tmp_path, cli):
    """Pending, rejected and approved cases all run; a case removed by a later sync stays in
    the experiments that pinned it, at the version they pinned, and leaves new experiments."""
    from tests.conftest import ADMIN_PASSWORD
    from tests.integration.runs_helpers import (
        api,
        create_agent,
        engine_server,
        harness,
        login_token,
        write_suite,
    )

    engine = engine_server(database_url, tmp_path)
    try:
        token = login_token(engine, "admin", ADMIN_PASSWORD)
        cli.monkeypatch.setenv("EVALKIT_SERVER_URL", engine.url)
        cli.monkeypatch.setenv("EVALKIT_TOKEN", token)
        assert cli("workspaces", "create", "dev").code == 0
        repo = Repo(tmp_path / "repo")
        suite = write_suite(repo)  # add, mul, sub
        assert cli("sync", str(suite), "--workspace", "dev").code == 0
        assert cli("cases", "reject", "add@dev", "--comment", "unclear").code == 0
        assert cli("cases", "approve", "mul@dev").code == 0  # sub stays pending
        states = {
            c["id"]: c["review_state"] for c in cli("cases", "list", "finance@dev", "--json").json
        }
        assert states == {"add": "rejected", "mul": "approved", "sub": "pending"}

        with harness() as ref:
            create_agent(engine, token, "dev", "ref", ref.url)
            first = cli("run", "finance@dev", "--agent", "ref@dev", "--json")
            assert first.code == 0, first.err
            assert sorted(r["case_id"] for r in first.json["run_list"]) == ["add", "mul", "sub"]
            assert all(r["state"] == "done" for r in first.json["run_list"])

            (suite / "sub.yaml").unlink()
            removed = cli("sync", str(suite), "--workspace", "dev", "--json")
            assert removed.json["removed"] == ["sub"]
            second = cli("run", "finance@dev", "--agent", "ref@dev", "--json")
            assert second.code == 0, second.err
            assert sorted(r["case_id"] for r in second.json["run_list"]) == ["add", "mul"]

        pinned = api(engine, token, "GET", f"/api/experiments/{first.json['id']}").json()
        sub_run = next(r for r in pinned["run_list"] if r["case_id"] == "sub")
        run = api(engine, token, "GET", f"/api/runs/{sub_run['id']}").json()
        assert run["case_version"] == 1 and run["state"] == "done"
        versions = cli("cases", "show", "sub@dev", "--json").json["versions"]
        assert [(v["version"], v["removed"]) for v in versions] == [(1, True)]
    finally:
        engine.stop()


def test_no_decision_on_a_removed_case_until_it_is_restored(cli, server, tmp_path, admin_token):
    repo, tokens = _setup(cli, server, tmp_path, admin_token)
    suite = repo.suite("finance")
    text = (suite / "revenue.yaml").read_text()
    (suite / "revenue.yaml").unlink()
    assert cli("sync", str(suite), "--workspace", "dev", token=tokens["writer"]).code == 0
    refused = cli("cases", "approve", "revenue@dev", token=tokens["reviewer"])
    assert refused.code == 1 and "[case-removed]" in refused.err
    assert "add its file back and sync" in refused.err
    # a comment is still fine, and a restore makes it decidable again
    assert cli("cases", "comment", "revenue@dev", "why gone?", token=tokens["reviewer"]).code == 0
    (suite / "revenue.yaml").write_text(text)
    assert cli("sync", str(suite), "--workspace", "dev", token=tokens["writer"]).code == 0
    ok = cli("cases", "approve", "revenue@dev", "--json", token=tokens["reviewer"])
    assert ok.code == 0 and ok.json["review_state"] == "approved", ok.err
