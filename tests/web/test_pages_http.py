"""The web UI over plain HTTP: the session cookie, CSRF, redirects and refusals. The
browser tests (Playwright) are in ``test_browser.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from evalkit.web import PAGES
from evalkit.web.page import SESSION_COOKIE
from tests.conftest import ADMIN_PASSWORD


def browser(server) -> httpx.Client:
    return httpx.Client(base_url=server.url, follow_redirects=False)


@contextmanager
def logged_in(
    server, username: str = "admin", password: str = ADMIN_PASSWORD
) -> Iterator[httpx.Client]:
    with browser(server) as client:
        r = client.post("/login", data={"username": username, "password": password, "next": "/"})
        assert r.status_code == 303, r.text
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "the page has no CSRF field"
    return found[1]


def test_anonymous_pages_redirect_to_login_with_the_way_back(server):
    with browser(server) as client:
        r = client.get("/w/admin?x=1")
        assert r.status_code == 303
        assert r.headers["location"] == "/login?next=%2Fw%2Fadmin%3Fx%3D1"
        login = client.get(r.headers["location"])
        assert login.status_code == 200
        assert 'name="next" value="/w/admin?x=1"' in login.text


@pytest.mark.parametrize("page", [p for p in PAGES if not p.public], ids=lambda p: p.path)
def test_every_private_page_needs_a_login(server, page):
    path = re.sub(r"\{(\w+)\}", "1", page.path)
    with browser(server) as client:
        r = client.request(page.method, path)
    assert r.status_code == 303, (page.method, page.path, r.status_code)
    assert r.headers["location"].startswith("/login")


def test_login_sets_a_strict_cookie_and_goes_back(server):
    with browser(server) as client:
        r = client.post(
            "/login", data={"username": "admin", "password": ADMIN_PASSWORD, "next": "/w/admin"}
        )
        assert r.status_code == 303 and r.headers["location"] == "/w/admin"
        cookie = r.headers["set-cookie"].lower()
        assert cookie.startswith(SESSION_COOKIE + "=")
        for part in ("httponly", "samesite=lax", "path=/"):
            assert part in cookie
        page = client.get("/w/admin")
        assert page.status_code == 200
        assert "<h1>admin" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"


def test_wrong_password_says_so_and_keeps_the_username(server):
    with browser(server) as client:
        r = client.post("/login", data={"username": "admin", "password": "nope", "next": "/"})
    assert r.status_code == 401
    assert "wrong username or password" in r.text
    assert 'value="admin"' in r.text
    assert SESSION_COOKIE not in r.headers.get("set-cookie", "")


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/\\evil"])
def test_login_never_redirects_off_the_server(server, target):
    with browser(server) as client:
        r = client.post(
            "/login", data={"username": "admin", "password": ADMIN_PASSWORD, "next": target}
        )
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_logout_needs_the_csrf_value_then_ends_the_session(server):
    with logged_in(server) as client:
        home = client.get("/")
        assert home.status_code == 200
        refused = client.post("/logout", data={"csrf": "0" * 64})
        assert refused.status_code == 403
        assert "CSRF" in refused.text
        assert client.get("/").status_code == 200  # still logged in
        token = client.cookies[SESSION_COOKIE]
        done = client.post("/logout", data={"csrf": csrf_of(home.text)})
        assert done.status_code == 303 and done.headers["location"] == "/login"
    # The token itself is revoked, not only the cookie dropped.
    r = httpx.get(f"{server.url}/api/auth/whoami", headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 401


def test_workspaces_page_marks_other_personal_workspaces_read_only(server, cli, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    created = cli("users", "add", "bob", "--json", token=admin_token)
    assert created.code == 0, created.err
    password = created.json["generated_password"]
    with logged_in(server, "bob", password) as client:
        html = client.get("/").text
    rows = {
        m[1]: m[2]
        for m in re.finditer(r'<td><a href="/w/(\w+)">\w+</a></td>(.*?)</tr>', html, re.S)
    }
    assert set(rows) == {"admin", "bob"}
    assert "read-only" in rows["admin"]
    assert "read-only" not in rows["bob"]


def test_a_missing_workspace_is_a_404_page(server):
    with logged_in(server) as client:
        r = client.get("/w/nope")
    assert r.status_code == 404
    assert "nope" in r.text
