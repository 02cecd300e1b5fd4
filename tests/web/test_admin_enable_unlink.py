"""The admin page's Enable button (a disabled user logs in again) and Remove button (a
promotion link goes, and the former target takes sync again): over HTTP, with the
refusals of non-admins, and in a real browser."""

from __future__ import annotations

import re

import httpx

from tests.integration.datasets_helpers import add_user, admin_api
from tests.web.test_pages_http import csrf_of, logged_in

CASES = {"cases": [{"id": "c1", "content": {"input": {"q": "x"}}}]}


def _users(server, admin_token) -> dict[str, bool]:
    users = admin_api(server, admin_token, "GET", "/api/users").json()
    return {u["username"]: u["disabled"] for u in users}


def _link(server, admin_token) -> None:
    for name in ("dev", "prod"):
        admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": name})
    admin_api(server, admin_token, "PUT", "/api/workspaces/dev/promotion", json={"target": "prod"})


def _sync_prod(server, token: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/workspaces/prod/datasets/finance/sync",
        json=CASES,
        headers={"Authorization": f"Bearer {token}"},
    )


def test_enable_button_over_http(server, admin_token):
    add_user(server, admin_token, "nina")
    add_user(server, admin_token, "otto")
    admin_api(server, admin_token, "POST", "/api/users/nina/disable")
    with logged_in(server) as client:
        page = client.get("/admin").text
        assert "Enable nina" in page and "Disable nina" not in page
        assert "Enable otto" not in page and "Disable otto" in page  # only disabled users
        assert 'action="/admin/users/nina/enable"' in page
        done = client.post("/admin/users/nina/enable", data={"csrf": csrf_of(page)})
        assert done.status_code == 303 and done.headers["location"] == "/admin?done=enabled"
        after = client.get(done.headers["location"]).text
        assert "User enabled" in after and "Disable nina" in after and "Enable nina" not in after
        ghost = client.post("/admin/users/ghost/enable", data={"csrf": csrf_of(after)})
        assert ghost.status_code == 404 and "no user named &#39;ghost&#39;" in ghost.text
    assert _users(server, admin_token)["nina"] is False
    login = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "nina", "password": "nina-password"}
    )
    assert login.status_code == 200
    audit = admin_api(server, admin_token, "GET", "/api/audit?action=user.enable").json()
    assert [(e["actor"], e["target"]) for e in audit] == [("admin", "nina")]


def test_remove_button_over_http(server, admin_token):
    _link(server, admin_token)
    with logged_in(server) as client:
        page = client.get("/admin/workspaces").text
        assert 'action="/admin/promotions/dev/remove"' in page
        assert "Remove link from dev to prod" in page
        done = client.post("/admin/promotions/dev/remove", data={"csrf": csrf_of(page)})
        assert done.status_code == 303
        assert done.headers["location"] == "/admin/workspaces?done=unlinked"
        after = client.get(done.headers["location"]).text
        assert "Promotion link removed" in after and "No promotion links." in after
        assert "Remove link from" not in after
        again = client.post("/admin/promotions/dev/remove", data={"csrf": csrf_of(after)})
        assert again.status_code == 404 and "@dev has no promotion link to remove" in again.text
    assert (
        admin_api(server, admin_token, "GET", "/api/workspaces/dev").json()["promotes_to"] is None
    )
    assert _sync_prod(server, admin_token).status_code == 200
    audit = admin_api(server, admin_token, "GET", "/api/audit?action=promotion.remove").json()
    assert [(e["target"], e["detail"]) for e in audit] == [("dev", {"promotes_to": "prod"})]


def test_non_admins_cannot_enable_or_unlink(server, admin_token):
    _link(server, admin_token)
    add_user(server, admin_token, "nina")
    admin_api(server, admin_token, "POST", "/api/users/nina/disable")
    add_user(server, admin_token, "rita")
    with logged_in(server, "rita", "rita-password") as client:
        csrf = csrf_of(client.get("/").text)
        for path in ("/admin/users/nina/enable", "/admin/promotions/dev/remove"):
            r = client.post(path, data={"csrf": csrf})
            assert r.status_code == 403, (path, r.text)
            assert "rita is not an admin" in r.text and "admin-only" in r.text
    assert _users(server, admin_token)["nina"] is True
    assert admin_api(server, admin_token, "GET", "/api/workspaces/dev").json()["promotes_to"] == (
        "prod"
    )


def test_enable_a_user_in_the_browser(server, admin_token, page, log_in):
    add_user(server, admin_token, "nina")
    admin_api(server, admin_token, "POST", "/api/users/nina/disable")
    log_in(server.url)
    page.get_by_role("link", name="Admin", exact=True).click()
    page.wait_for_url(f"{server.url}/admin")
    row = page.get_by_role("row", name=re.compile(r"^nina "))
    assert "disabled" in row.inner_text()
    page.shot("disabled")
    page.set_viewport_size({"width": 390, "height": 800})
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a phone screen"
    page.set_viewport_size({"width": 1280, "height": 900})
    row.get_by_role("button", name="Enable nina").click()
    page.wait_for_url(f"{server.url}/admin?done=enabled")
    assert page.get_by_text("User enabled").is_visible()
    assert page.get_by_role("button", name="Disable nina").is_visible()
    assert page.get_by_role("button", name="Enable nina").count() == 0
    page.shot("enabled")
    # nina logs in again through the form.
    page.get_by_role("button", name="Log out").click()
    log_in(server.url, "nina", "nina-password")
    assert page.get_by_role("link", name="Admin", exact=True).count() == 0


def test_remove_a_promotion_link_in_the_browser(server, admin_token, page, log_in):
    _link(server, admin_token)
    assert _sync_prod(server, admin_token).json()["error"]["code"] == "promotion-target-no-sync"
    log_in(server.url)
    page.goto(f"{server.url}/admin/workspaces")
    assert page.get_by_text("← fed by dev").is_visible()
    page.shot("linked")
    page.set_viewport_size({"width": 390, "height": 800})
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a phone screen"
    page.shot("linked-phone")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.get_by_role("button", name="Remove link from dev to prod").click()
    page.wait_for_url(f"{server.url}/admin/workspaces?done=unlinked")
    assert page.get_by_text("Promotion link removed").is_visible()
    assert page.get_by_text("No promotion links.").is_visible()
    assert page.get_by_text("← fed by dev").count() == 0
    page.shot("unlinked")
    assert _sync_prod(server, admin_token).status_code == 200
