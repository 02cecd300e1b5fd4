"""The dataset and case pages, and the browse endpoints behind them: over HTTP (filters,
pages, diff, review refusals) and in a real browser (review a case; a reader cannot)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

from tests.integration.datasets_helpers import add_user, admin_api
from tests.web.test_pages_http import csrf_of, logged_in

SHA = "c0ffee" + "0" * 34


@dataclass
class Seeded:
    admin: str
    writer: str
    reviewer: str
    reader: str


def _case(i: int) -> dict:
    return {
        "id": f"case-{i:03d}",
        "content": {
            "input": {"question": f"What is {i}+{i}?"},
            "expected": {"answer": str(2 * i)},
            "tags": ["math", "even" if i % 2 == 0 else "odd"],
            "split": "test" if i % 3 == 0 else "train",
        },
        "source": f"case-{i:03d}.yaml",
    }


REFUND_V1 = {
    "input": {"question": "How long is the refund window?"},
    "expected": {"answer": "30 days"},
    "tags": ["billing"],
    "split": "test",
    "evaluators": {"exact_match": True},
}
REFUND_V2 = {**REFUND_V1, "expected": {"answer": "14 days"}, "tags": ["billing", "eu"]}


def sync(server, token: str, workspace: str, dataset: str, cases: list[dict], **kw) -> dict:
    r = httpx.post(
        f"{server.url}/api/workspaces/{workspace}/datasets/{dataset}/sync",
        json={"cases": cases, **kw},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    return r.json()


def seed(server, admin_token: str, *, many: int = 5) -> Seeded:
    """@dev promotes to @prod; finance@dev has ``refund`` (two versions) and ``many`` more
    cases; wendy writes, rob reviews, rita is only logged in."""
    for ws in ("dev", "prod"):
        admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": ws})
    admin_api(server, admin_token, "PUT", "/api/workspaces/dev/promotion", json={"target": "prod"})
    admin_api(
        server, admin_token, "POST", "/api/workspaces/prod/datasets", json={"name": "finance"}
    )
    people = Seeded(
        admin=admin_token,
        writer=add_user(server, admin_token, "wendy", member_of="dev"),
        reviewer=add_user(server, admin_token, "rob", member_of="dev", role="reviewer"),
        reader=add_user(server, admin_token, "rita"),
    )
    refund = {"id": "refund", "content": REFUND_V1, "source": "refund.yaml"}
    others = [_case(i) for i in range(1, many + 1)]
    sync(server, people.writer, "dev", "finance", [refund, *others], branch="main", sha="1" * 40)
    refund["content"] = REFUND_V2
    sync(server, people.writer, "dev", "finance", [refund, *others], branch="topic", sha=SHA)
    return people


def api_get(server, token: str, path: str, **params) -> dict:
    r = httpx.get(server.url + path, params=params, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()


def review_state(server, token: str, case: str, workspace: str = "dev") -> str:
    shown = api_get(server, token, f"/api/workspaces/{workspace}/cases/{case}")
    return shown["versions"][0]["review_state"]


# --------------------------------------------------------------------------- the API


def test_case_search_filters_and_pages(server, admin_token):
    seed(server, admin_token, many=12)
    path = "/api/workspaces/dev/datasets/finance/case-search"
    first = api_get(server, admin_token, path, limit=5)
    assert first["total"] == 13 and len(first["cases"]) == 5
    assert [c["id"] for c in first["cases"]][:2] == ["case-001", "case-002"]
    assert first["tags"] == ["billing", "eu", "even", "math", "odd"]
    assert first["splits"] == ["test", "train"]
    last = api_get(server, admin_token, path, limit=5, offset=10)
    assert [c["id"] for c in last["cases"]] == ["case-011", "case-012", "refund"]
    refund = last["cases"][-1]
    assert refund["tags"] == ["billing", "eu"] and refund["split"] == "test"
    assert refund["version"] == 2 and refund["review_state"] == "pending"
    beyond = api_get(server, admin_token, path, offset=500)
    assert beyond["total"] == 13 and beyond["cases"] == []

    odd_test = api_get(server, admin_token, path, tag="odd", split="test")
    assert [c["id"] for c in odd_test["cases"]] == ["case-003", "case-009"]
    assert api_get(server, admin_token, path, q="FUN")["total"] == 1
    assert api_get(server, admin_token, path, state="approved")["total"] == 0
    assert api_get(server, admin_token, path, state="pending")["total"] == 13

    bad = httpx.get(
        server.url + path,
        params={"state": "done"},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert bad.status_code == 400
    assert "state must be one of live, pending" in bad.json()["error"]["message"]
    bad = httpx.get(
        server.url + path,
        params={"limit": "0"},
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert bad.status_code == 400 and "limit must be a whole number" in bad.text


def test_version_text_and_diff(server, admin_token):
    seed(server, admin_token)
    v1 = api_get(server, admin_token, "/api/workspaces/dev/cases/refund/versions/1")
    assert v1["dataset"] == "finance" and v1["version"]["version"] == 1
    assert v1["text"].startswith("input:\n  question: How long is the refund window?\n")
    assert "answer: 30 days" in v1["text"]

    diff = api_get(server, admin_token, "/api/workspaces/dev/cases/refund/diff")
    assert (diff["from_version"], diff["to_version"], diff["changed"]) == (1, 2, True)
    changed = [(line["op"], line["text"]) for line in diff["lines"] if line["op"] != "same"]
    assert ("del", "  answer: 30 days") in changed
    assert ("add", "  answer: 14 days") in changed
    assert ("add", "- eu") in changed
    same = api_get(server, admin_token, "/api/workspaces/dev/cases/refund/diff", to=1)
    assert (same["from_version"], same["to_version"], same["changed"]) == (1, 1, False)

    missing = httpx.get(
        f"{server.url}/api/workspaces/dev/cases/refund/versions/9",
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert missing.status_code == 404
    assert "has no version 9 (its versions are 1 to 2)" in missing.json()["error"]["message"]


def test_promotions_list_both_sides(server, admin_token):
    people = seed(server, admin_token)
    r = httpx.post(
        f"{server.url}/api/workspaces/dev/cases/refund/approve",
        json={"comment": "checked with legal"},
        headers={"Authorization": f"Bearer {people.reviewer}"},
    )
    assert r.status_code == 200, r.text
    for workspace in ("dev", "prod"):
        page = api_get(
            server, people.reader, f"/api/workspaces/{workspace}/datasets/finance/promotions"
        )
        assert page["total"] == 1
        (p,) = page["promotions"]
        assert (p["case"], p["target_workspace"], p["target_version"]) == ("refund", "prod", 1)
        assert (p["source_workspace"], p["source_version"], p["actor"]) == ("dev", 2, "rob")
    other = api_get(
        server, people.reader, "/api/workspaces/dev/datasets/finance/promotions", case="case-001"
    )
    assert other["total"] == 0 and other["promoted_from"] is None
    assert other["promotes_to"] == "prod"


# --------------------------------------------------------------------------- pages over HTTP


def test_dataset_page_shows_sync_filters_and_pages(server, admin_token):
    seed(server, admin_token, many=60)
    with logged_in(server, "rita", "rita-password") as client:
        html = client.get("/w/dev/datasets/finance").text
        assert "topic" in html and SHA[:12] in html and "by wendy" in html
        assert "copies the approved version (with its overlays) to" in html
        assert "Cases 1–50 of 61" in html
        assert 'href="?offset=50#cases"' in html and "Previous" not in html
        page2 = client.get("/w/dev/datasets/finance?offset=50").text
        assert "Cases 51–61 of 61" in page2 and 'href="?offset=50' not in page2
        assert 'rel="prev"' in page2 and ">refund</a>" in page2

        tagged = client.get("/w/dev/datasets/finance", params={"tag": "billing"}).text
        assert "Cases 1–1 of 1" in tagged and ">refund</a>" in tagged
        assert '<option value="billing" selected>' in tagged
        none = client.get("/w/dev/datasets/finance", params={"q": "zzz"}).text
        assert "No case matches these filters" in none

        target = client.get("/w/prod/datasets/finance").text
        assert "is a promotion target" in target and "Nothing promoted yet" in target
        bad = client.get("/w/dev/datasets/finance?limit=x")
        assert bad.status_code == 400 and "limit must be a whole number" in bad.text
        assert client.get("/w/dev/datasets/nope").status_code == 404


def test_case_page_shows_versions_diff_and_changelog(server, admin_token):
    seed(server, admin_token)
    with logged_in(server, "rita", "rita-password") as client:
        r = client.get("/w/dev/datasets/finance/cases/refund")
        assert r.status_code == 200
        html = r.text
        assert "Version 2 of 2" in html and "answer: 14 days" in html
        assert '<span class="del" style="display:block">-   answer: 30 days</span>' in html
        assert '<span class="add" style="display:block">+   answer: 14 days</span>' in html
        assert "sync from <code>topic@c0ffee000000</code>" in html
        old = client.get("/w/dev/datasets/finance/cases/refund?version=1").text
        assert "Content of version 1" in old and "answer: 30 days" in old
        moved = client.get("/w/dev/datasets/other/cases/refund")
        assert moved.status_code == 303
        assert moved.headers["location"] == "/w/dev/datasets/finance/cases/refund"


def test_reader_sees_no_review_buttons_and_a_direct_post_changes_nothing(server, admin_token):
    people = seed(server, admin_token)
    url = "/w/dev/datasets/finance/cases/refund"
    with logged_in(server, "rita", "rita-password") as client:
        html = client.get(url).text
        assert "Approve version" not in html and "Reject version" not in html
        assert "Only reviewers of @dev and admins approve" in html
        csrf = csrf_of(html)
        for action in ("approve", "reject"):
            refused = client.post(f"{url}/{action}", data={"csrf": csrf, "version": "2"})
            assert refused.status_code == 403
            assert "rita is not a reviewer of @dev" in refused.text
            assert "reviewers-review" in refused.text
        no_csrf = client.post(f"{url}/approve", data={"version": "2"})
        assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    with logged_in(server, "wendy", "wendy-password") as client:  # a writer is no reviewer
        html = client.get(url).text
        assert "Approve version" not in html
        refused = client.post(f"{url}/approve", data={"csrf": csrf_of(html), "version": "2"})
        assert refused.status_code == 403
    assert review_state(server, people.admin, "refund") == "pending"
    events = api_get(server, people.admin, "/api/workspaces/dev/cases/refund")["events"]
    assert [e["kind"] for e in events] == ["add", "change"]


def test_reviewer_approves_and_sees_where_it_went(server, admin_token):
    people = seed(server, admin_token)
    url = "/w/dev/datasets/finance/cases/refund"
    with logged_in(server, "rob", "rob-password") as client:
        html = client.get(url).text
        assert "Approve version 2" in html and "Reject version 2" in html
        done = client.post(
            f"{url}/approve", data={"csrf": csrf_of(html), "version": "2", "comment": "ok"}
        )
        assert done.status_code == 303
        assert done.headers["location"] == f"{url}?done=approve#review"
        after = client.get(done.headers["location"]).text
        assert "Approved. The changelog below has the entry." in after
        assert "Where it was promoted" in after and "refund@prod v1" in after
        target = client.get("/w/prod/datasets/finance/cases/refund").text
        assert "Approve version" not in target and "is a promotion target" in target
        assert "Where it came from" in target and "refund@dev v2" in target
    assert review_state(server, people.admin, "refund") == "approved"
    assert review_state(server, people.admin, "refund", "prod") == "approved"


def test_comments_from_anyone_and_no_review_in_personal(server, admin_token):
    seed(server, admin_token)
    sync(server, admin_token, "admin", "mine", [{"id": "m1", "content": {"input": {}}}])
    with logged_in(server, "rita", "rita-password") as client:
        url = "/w/dev/datasets/finance/cases/refund"
        html = client.get(url).text
        r = client.post(f"{url}/comments", data={"csrf": csrf_of(html), "text": "  why 14?  "})
        assert r.status_code == 303 and r.headers["location"].endswith("?done=comment#comments")
        html = client.get(r.headers["location"]).text
        assert re.search(r"<strong>rita</strong>.*?why 14\?", html, re.S)
        empty = client.post(f"{url}/comments", data={"csrf": csrf_of(html), "text": " "})
        assert empty.status_code == 400
    with logged_in(server) as client:  # the admin, in their own personal workspace
        html = client.get("/w/admin/datasets/mine/cases/m1").text
        assert "Approve version" not in html
        assert "Cases in a personal workspace are not reviewed" in html


# --------------------------------------------------------------------------- in a browser


def test_review_a_case_in_the_browser(server, admin_token, page, log_in):
    seed(server, admin_token, many=8)
    log_in(server.url, "rob", "rob-password")
    page.get_by_role("link", name="dev", exact=True).click()
    page.get_by_role("link", name="finance", exact=True).click()
    page.wait_for_url(f"{server.url}/w/dev/datasets/finance")
    page.shot("dataset")
    page.get_by_label("Tag").select_option("billing")  # app.js submits the filter at once
    page.wait_for_url(re.compile(r".*tag=billing.*"))
    assert page.get_by_text("Cases 1–1 of 1").is_visible()
    page.get_by_role("link", name="refund", exact=True).click()
    page.wait_for_url(f"{server.url}/w/dev/datasets/finance/cases/refund")
    page.shot("case-before")
    page.get_by_label("Note for the changelog (optional)").fill("matches the EU policy")
    page.get_by_role("button", name="Approve version 2").click()
    page.wait_for_url(re.compile(r".*done=approve.*"))
    assert page.get_by_role("status").inner_text().startswith("Approved.")
    heading = page.get_by_role("heading", level=1)
    assert "approved" in heading.inner_text()
    log = page.locator("section", has=page.get_by_role("heading", name="Changelog"))
    newest = log.locator("tbody tr").first
    assert "approve" in newest.inner_text() and "rob" in newest.inner_text()
    assert "matches the EU policy" in newest.inner_text()
    promoted = page.locator(
        "section", has=page.get_by_role("heading", name="Where it was promoted")
    )
    assert "refund@prod v1" in promoted.inner_text()
    page.shot("case-approved")
    page.get_by_role("link", name="refund@prod v1").click()
    page.wait_for_url(f"{server.url}/w/prod/datasets/finance/cases/refund")
    assert page.get_by_role("button", name=re.compile("Approve")).count() == 0
    page.shot("case-in-target")


def test_a_reader_cannot_review_in_the_browser(server, admin_token, page, log_in):
    people = seed(server, admin_token)
    url = f"{server.url}/w/dev/datasets/finance/cases/refund"
    log_in(server.url, "rita", "rita-password")
    page.goto(url)
    assert page.get_by_role("button", name=re.compile("Approve|Reject")).count() == 0
    assert page.get_by_text("Only reviewers of @dev and admins approve").is_visible()
    page.shot("reader")
    # Post the approve form by hand, with the reader's own valid CSRF value.
    page.evaluate(
        """() => {
          const form = document.createElement("form");
          form.method = "post";
          form.action = location.pathname + "/approve";
          for (const [name, value] of [["csrf", document.querySelector("[name=csrf]").value],
                                       ["version", "2"]]) {
            const input = document.createElement("input");
            input.type = "hidden"; input.name = name; input.value = value;
            form.appendChild(input);
          }
          document.body.appendChild(form);
          form.submit();
        }"""
    )
    page.wait_for_url(url + "/approve")
    assert page.get_by_role("heading", name="That did not work").is_visible()
    assert "rita is not a reviewer of @dev" in page.get_by_role("alert").inner_text()
    page.shot("refused")
    assert review_state(server, people.admin, "refund") == "pending"


def test_case_page_fits_a_phone(server, admin_token, page, log_in):
    seed(server, admin_token)
    log_in(server.url, "rob", "rob-password")
    page.set_viewport_size({"width": 390, "height": 800})
    for path in ("/w/dev/datasets/finance", "/w/dev/datasets/finance/cases/refund"):
        page.goto(server.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a phone screen"
    page.shot("case-phone")
