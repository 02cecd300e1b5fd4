"""The admin pages: users, workspaces and members, promotion links, LLM providers and the
default judge. Over HTTP (each form does what the API does; non-admins get the 403 page
and change nothing) and in a real browser (add a user, make them a reviewer)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.integration.datasets_helpers import add_user, admin_api
from tests.web.test_pages_http import csrf_of, logged_in

PUBLIC_URL = "http://203.0.113.10:8700/v1"  # a documentation address: never dialled


def api_get(server, token: str, path: str):
    r = httpx.get(server.url + path, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("path", ["/admin", "/admin/workspaces", "/admin/judges"])
def test_non_admins_get_the_403_page(server, admin_token, path):
    add_user(server, admin_token, "rita")
    with logged_in(server, "rita", "rita-password") as client:
        home = client.get("/").text
        assert 'href="/admin"' not in home
        r = client.get(path)
    assert r.status_code == 403
    assert "rita is not an admin and cannot open the admin pages" in r.text
    assert "admin-only" in r.text


def test_non_admin_posts_are_refused_and_change_nothing(server, admin_token):
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "dev"})
    add_user(server, admin_token, "rita")
    posts = [
        ("/admin/users", {"username": "mallory", "is_admin": "on"}),
        ("/admin/users/admin/disable", {}),
        ("/admin/workspaces", {"name": "evil"}),
        ("/admin/workspaces/dev/members", {"username": "rita", "role": "reviewer"}),
        ("/admin/promotions", {"source": "dev", "target": "rita"}),
        ("/admin/providers", {"name": "x", "base_url": PUBLIC_URL}),
        ("/admin/judge", {"provider": "x", "model": "m"}),
        ("/admin/judge/clear", {}),
    ]
    with logged_in(server, "rita", "rita-password") as client:
        csrf = csrf_of(client.get("/").text)
        for path, data in posts:
            r = client.post(path, data={"csrf": csrf, **data})
            assert r.status_code == 403, (path, r.text)
            assert "rita is not an admin" in r.text, path
    users = {u["username"] for u in api_get(server, admin_token, "/api/users")}
    assert users == {"admin", "rita"}
    names = {w["name"] for w in api_get(server, admin_token, "/api/workspaces")}
    assert "evil" not in names
    assert api_get(server, admin_token, "/api/workspaces/dev/members") == []
    assert api_get(server, admin_token, "/api/llm-providers") == []


def test_add_a_user_shows_the_password_once_then_disable(server):
    with logged_in(server) as client:
        page = client.get("/admin")
        assert page.status_code == 200 and "Add a user" in page.text
        r = client.post("/admin/users", data={"csrf": csrf_of(page.text), "username": "nina"})
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
        password = re.search(r'aria-label="Generated password"[^>]*>([^<]+)</pre>', r.text)[1]
        assert "shown <strong>only this once</strong>" in r.text
        again = client.get("/admin").text
        assert ">nina</a>" in again and password not in again
        login = httpx.post(
            f"{server.url}/api/auth/login", json={"username": "nina", "password": password}
        )
        assert login.status_code == 200
        taken = client.post("/admin/users", data={"csrf": csrf_of(again), "username": "nina"})
        assert taken.status_code == 409 and "nina" in taken.text
        assert "Disable admin" not in again  # nobody disables themselves
        done = client.post("/admin/users/nina/disable", data={"csrf": csrf_of(again)})
        assert done.status_code == 303 and done.headers["location"] == "/admin?done=disabled"
        after = client.get(done.headers["location"]).text
        assert "User disabled" in after and "Disable nina" not in after
    login = httpx.post(
        f"{server.url}/api/auth/login", json={"username": "nina", "password": password}
    )
    assert login.status_code == 401


def test_workspaces_members_and_promotion_links(server, admin_token):
    add_user(server, admin_token, "rob")
    with logged_in(server) as client:
        csrf = csrf_of(client.get("/admin/workspaces").text)
        for name in ("dev", "prod"):
            r = client.post("/admin/workspaces", data={"csrf": csrf, "name": name})
            assert r.status_code == 303
        bad = client.post("/admin/workspaces", data={"csrf": csrf, "name": "Bad Name"})
        assert bad.status_code == 400 and "is not a valid name" in bad.text
        add = {"csrf": csrf, "username": "rob", "role": "writer"}
        assert client.post("/admin/workspaces/dev/members", data=add).status_code == 303
        add["role"] = "reviewer"
        assert client.post("/admin/workspaces/dev/members", data=add).status_code == 303
        link = {"csrf": csrf, "source": "dev", "target": "prod"}
        assert client.post("/admin/promotions", data=link).status_code == 303
        html = client.get("/admin/workspaces?done=promotion").text
        assert "Promotion link saved." in html
        assert re.search(r"<td>rob</td>\s*<td>reviewer</td>", html)
        assert '<tr><td><a href="/w/dev">dev</a></td><td><a href="/w/prod">prod</a></td>' in html
        chain = client.post("/admin/promotions", data={**link, "source": "prod", "target": "dev"})
        assert chain.status_code == 409
    assert api_get(server, admin_token, "/api/workspaces/dev/members") == [
        {"username": "rob", "role": "reviewer", "disabled": False}
    ]
    with logged_in(server) as client:
        csrf = csrf_of(client.get("/admin/workspaces").text)
        r = client.post("/admin/workspaces/dev/members/rob/remove", data={"csrf": csrf})
        assert r.status_code == 303 and r.headers["location"] == "/admin/workspaces?done=removed"
    assert api_get(server, admin_token, "/api/workspaces/dev/members") == []


def test_providers_and_the_default_judge(server, admin_token):
    with logged_in(server) as client:
        page = client.get("/admin/judges").text
        assert "No default judge" in page and "Add an LLM provider below first" in page
        csrf = csrf_of(page)
        r = client.post(
            "/admin/providers",
            data={
                "csrf": csrf,
                "name": "openai",
                "base_url": PUBLIC_URL,
                "api_key": "sk-very-secret",
                "api_key_env": "OPENAI_API_KEY",
            },
        )
        assert r.status_code == 303, r.text
        refused = client.post(
            "/admin/providers",
            data={"csrf": csrf, "name": "local", "base_url": "http://127.0.0.1:9/v1"},
        )
        assert refused.status_code in (400, 403) and "127.0.0.1" in refused.text
        judge = {"csrf": csrf, "provider": "openai", "model": "gpt-4o-mini"}
        assert client.post("/admin/judge", data=judge).status_code == 303
        page = client.get("/admin/judges").text
        assert "sk-very-secret" not in page
        assert "stored (from <code>$OPENAI_API_KEY</code>)" in page
        assert "graded by <strong>gpt-4o-mini</strong> on <strong>openai</strong>" in page
        assert "also unset the default judge" in page
        kept = client.post("/admin/providers/openai/delete", data={"csrf": csrf})
        assert kept.status_code == 409
        forced = client.post("/admin/providers/openai/delete", data={"csrf": csrf, "force": "on"})
        assert forced.status_code == 303
        page = client.get("/admin/judges").text
        assert "No LLM providers yet" in page and "No default judge" in page
    assert api_get(server, admin_token, "/api/judge-default")["provider"] is None


def test_clear_the_default_judge(server, admin_token):
    admin_api(
        server,
        admin_token,
        "POST",
        "/api/llm-providers",
        json={"name": "p", "base_url": PUBLIC_URL},
    )
    admin_api(
        server, admin_token, "PUT", "/api/judge-default", json={"provider": "p", "model": "m"}
    )
    with logged_in(server) as client:
        page = client.get("/admin/judges").text
        r = client.post("/admin/judge/clear", data={"csrf": csrf_of(page)})
        assert r.status_code == 303
        assert "Default judge unset" in client.get(r.headers["location"]).text
    assert api_get(server, admin_token, "/api/judge-default")["model"] is None


def test_add_a_reviewer_in_the_browser(server, page, log_in):
    log_in(server.url)
    page.get_by_role("link", name="Admin", exact=True).click()
    page.wait_for_url(f"{server.url}/admin")
    page.get_by_label("Username").fill("rob")
    page.get_by_role("button", name="Add user").click()
    password = page.get_by_label("Generated password").inner_text().strip()
    assert len(password) >= 12
    page.shot("user-added")
    page.get_by_role("link", name="Workspaces and members").first.click()
    page.get_by_label("New shared workspace").fill("dev")
    page.get_by_role("button", name="Create workspace").click()
    page.wait_for_url(f"{server.url}/admin/workspaces?done=workspace")
    form = page.locator("form", has=page.get_by_role("button", name="Add to dev"))
    form.get_by_label("User").select_option("rob")
    form.get_by_label("Role").select_option("reviewer")
    form.get_by_role("button", name="Add to dev").click()
    page.wait_for_url(f"{server.url}/admin/workspaces?done=member")
    assert page.get_by_role("button", name="Remove rob from dev").is_visible()
    page.shot("workspaces")
    page.get_by_role("link", name="LLM providers and judge").click()
    page.get_by_label("Name", exact=True).fill("openai")
    page.get_by_label("Base URL").fill(PUBLIC_URL)
    page.get_by_label("API key").fill("sk-secret")
    page.get_by_role("button", name="Add provider").click()
    page.get_by_label("Model").fill("gpt-4o-mini")
    page.get_by_role("button", name="Set default judge").click()
    page.wait_for_url(f"{server.url}/admin/judges?done=judge")
    assert page.get_by_text("default judge", exact=True).is_visible()
    page.shot("judges")
    # rob can now log in with the shown password, and is a reviewer of dev
    page.get_by_role("button", name="Log out").click()
    log_in(server.url, "rob", password)
    assert "reviewer" in page.get_by_role("row", name=re.compile(r"^dev ")).inner_text()


def test_a_user_sees_the_403_page_in_the_browser(server, admin_token, page, log_in):
    add_user(server, admin_token, "rita")
    log_in(server.url, "rita", "rita-password")
    assert page.get_by_role("link", name="Admin", exact=True).count() == 0
    response = page.goto(f"{server.url}/admin")
    assert response.status == 403
    assert "rita is not an admin" in page.get_by_role("alert").inner_text()
    page.shot("forbidden")


def test_admin_pages_fit_a_phone(server, admin_token, page, log_in):
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "dev"})
    add_user(server, admin_token, "rob", member_of="dev", role="reviewer")
    admin_api(
        server,
        admin_token,
        "POST",
        "/api/llm-providers",
        json={"name": "openai", "base_url": PUBLIC_URL, "api_key": "k", "api_key_env": "KEY"},
    )
    log_in(server.url)
    page.set_viewport_size({"width": 390, "height": 800})
    for path in ("/admin", "/admin/workspaces", "/admin/judges"):
        page.goto(server.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a phone screen"
    page.shot("judges-phone")
