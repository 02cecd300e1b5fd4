"""Removing a promotion link (`evalkit workspaces promote-to SOURCE --remove`, DELETE
/api/workspaces/{workspace}/promotion): admins only, audited; the former target takes
sync and review again, approvals in the source no longer promote, and the versions
already promoted stay."""

from __future__ import annotations

import httpx

from tests.integration.datasets_helpers import Repo, add_user, login


def _linked(cli, server, tmp_path, admin_token):
    """dev -> prod, with refund@dev approved and so promoted into finance@prod."""
    login(cli, server)
    for ws in ("dev", "prod"):
        assert cli("workspaces", "create", ws).code == 0
    tokens = {
        "writer": add_user(server, admin_token, "wendy", member_of="dev"),
        "reviewer": add_user(server, admin_token, "rob", member_of="dev", role="reviewer"),
    }
    for name, role in (("wendy", "writer"), ("rob", "reviewer")):
        assert cli("workspaces", "members", "add", "prod", name, "--role", role).code == 0
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "refund", question="Refund window?", answer="30 days")
    repo.case("finance", "revenue")
    synced = cli("sync", str(repo.suite("finance")), "--workspace", "dev", token=tokens["writer"])
    assert synced.code == 0, synced.err
    assert cli("workspaces", "promote-to", "dev", "prod").code == 0
    assert cli("datasets", "create", "finance@prod").code == 0
    approved = cli("cases", "approve", "refund@dev", token=tokens["reviewer"])
    assert "promoted refund to finance@prod (v1, approved)" in approved.out, approved.err
    return repo, tokens


def test_remove_a_link_then_sync_and_review_in_the_former_target(
    cli, server, tmp_path, admin_token
):
    repo, tokens = _linked(cli, server, tmp_path, admin_token)
    before = cli("sync", str(repo.suite("finance")), "--workspace", "prod", token=tokens["writer"])
    assert before.code == 1 and "[promotion-target-no-sync]" in before.err

    removed = cli("workspaces", "promote-to", "dev", "--remove")
    assert removed.code == 0, removed.err
    assert removed.out.strip() == (
        "approvals in @dev no longer promote to @prod; @prod takes sync and review again "
        "and keeps what was promoted"
    )
    assert cli("workspaces", "show", "dev", "--json").json["promotes_to"] is None
    assert cli("workspaces", "show", "prod", "--json").json["promoted_from"] is None
    listed = cli("workspaces", "list").out
    assert "-> @prod" not in listed and "<- @dev" not in listed

    # What was promoted stays, with where it came from.
    refund = cli("cases", "show", "refund@prod", "--json").json
    assert [(v["version"], v["review_state"]) for v in refund["versions"]] == [(1, "approved")]
    assert refund["versions"][0]["promoted_from"] == "refund@dev v1"

    # Approvals in dev no longer promote.
    approved = cli("cases", "approve", "revenue@dev", "--json", token=tokens["reviewer"])
    assert approved.code == 0 and approved.json["promoted"] == []
    assert [c["id"] for c in cli("cases", "list", "finance@prod", "--json").json] == ["refund"]

    # prod takes sync from its writers and review decisions from its reviewers again.
    synced = cli("sync", str(repo.suite("finance")), "--workspace", "prod", token=tokens["writer"])
    assert synced.code == 0, synced.err
    ids = sorted(c["id"] for c in cli("cases", "list", "finance@prod", "--json").json)
    assert ids == ["refund", "revenue"]
    decided = cli("cases", "reject", "revenue@prod", "--json", token=tokens["reviewer"])
    assert decided.code == 0, decided.err
    assert decided.json["review_state"] == "rejected"

    entries = cli("audit", "--action", "promotion.remove", "--json").json
    assert [(e["actor"], e["target"], e["detail"]) for e in entries] == [
        ("admin", "dev", {"promotes_to": "prod"})
    ]


def test_remove_refuses_when_there_is_no_link(cli, server):
    login(cli, server)
    for ws in ("dev", "prod"):
        assert cli("workspaces", "create", ws).code == 0
    none = cli("workspaces", "promote-to", "dev", "--remove")
    assert none.code == 1
    assert "@dev has no promotion link to remove" in none.err
    assert "`evalkit workspaces list` shows the links" in none.err
    assert "[no-promotion-link]" in none.err

    assert cli("workspaces", "promote-to", "dev", "prod").code == 0
    target = cli("workspaces", "promote-to", "prod", "--remove")
    assert target.code == 1
    assert "@prod is the target of a promotion link, not its source" in target.err
    assert "`evalkit workspaces promote-to dev --remove`" in target.err
    ghost = cli("workspaces", "promote-to", "nope", "--remove")
    assert ghost.code == 1 and "no workspace named 'nope'" in ghost.err
    # The refusals changed nothing and left no audit row.
    assert cli("workspaces", "show", "dev", "--json").json["promotes_to"] == "prod"
    assert cli("audit", "--action", "promotion.remove", "--json").json == []

    # The command's own refusals: --remove takes the source only; a link needs a target.
    both = cli("workspaces", "promote-to", "dev", "prod", "--remove")
    assert both.code == 1 and "--remove takes only the source" in both.err
    alone = cli("workspaces", "promote-to", "dev")
    assert alone.code == 1
    assert "`evalkit workspaces promote-to dev TARGET`, or add --remove" in alone.err
    assert cli("workspaces", "show", "dev", "--json").json["promotes_to"] == "prod"

    assert cli("workspaces", "promote-to", "dev", "--remove", "--json").json == {
        "source": "dev",
        "target": "prod",
    }
    # Linked again afterwards, the other way round: a removed link leaves nothing behind.
    assert cli("workspaces", "promote-to", "prod", "dev").code == 0


def test_remove_is_for_admins_only(cli, server, admin_token):
    login(cli, server)
    for ws in ("dev", "prod"):
        assert cli("workspaces", "create", ws).code == 0
    assert cli("workspaces", "promote-to", "dev", "prod").code == 0
    wendy = add_user(server, admin_token, "wendy", member_of="dev")

    refused = cli("workspaces", "promote-to", "dev", "--remove", token=wendy)
    assert refused.code == 1
    assert "wendy is not an admin and cannot unlink workspaces for promotion" in refused.err
    assert "[admin-only]" in refused.err

    r = httpx.delete(
        f"{server.url}/api/workspaces/dev/promotion", headers={"Authorization": f"Bearer {wendy}"}
    )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "admin-only"
    assert r.json()["error"]["message"].startswith("wendy is not an admin")
    assert cli("workspaces", "show", "dev", "--json").json["promotes_to"] == "prod"
    assert cli("audit", "--action", "promotion.remove", "--json").json == []


def test_remove_through_the_api(server, admin_token):
    auth = {"Authorization": f"Bearer {admin_token}"}
    for ws in ("dev", "prod"):
        httpx.post(f"{server.url}/api/workspaces", json={"name": ws}, headers=auth)
    url = f"{server.url}/api/workspaces/dev/promotion"
    assert httpx.put(url, json={"target": "prod"}, headers=auth).status_code == 200
    r = httpx.delete(url, headers=auth)
    assert r.status_code == 200 and r.json() == {"source": "dev", "target": "prod"}
    again = httpx.delete(url, headers=auth)
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "no-promotion-link"
    # sync into the former target through the API
    sync = httpx.post(
        f"{server.url}/api/workspaces/prod/datasets/finance/sync",
        json={"cases": [{"id": "c1", "content": {"input": {"q": "x"}}}]},
        headers=auth,
    )
    assert sync.status_code == 200, sync.text
