"""The web UI's defences, page by page (every page of ``evalkit.web.PAGES``, so a new page
cannot escape): security headers on every answer, the session cookie's flags, a CSRF
check on every POST page, the API's access rules behind every form, no open redirect
after login, and stored text shown escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from evalkit.otel.mapping import load_starter
from evalkit.web import PAGES
from evalkit.web.page import CONTENT_SECURITY_POLICY, SESSION_COOKIE, csrf_value, safe_next
from tests.conftest import ADMIN_PASSWORD, RunningServer
from tests.integration.judge_helpers import PUBLIC_URL
from tests.security.conftest import Api, login, module_server

PUBLIC_PAGES = {
    ("GET", "/login"),
    ("POST", "/login"),
    ("GET", "/login/sso"),
    ("GET", "/login/sso/callback"),
    ("GET", "/docs"),
    ("GET", "/docs/{page}"),
}
READER_PASSWORD = "reader-password-1"
XSS = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
TTL_HOURS = 12

# What a reader (a user with no role) gets from each POST page with a valid CSRF value:
# the rule of the API handler the page calls, allowed (a redirect, 303), or past the
# access rules (its form below names a split with no cases, refused with a 400 after them).
READER_POSTS: dict[tuple[str, str], str] = {
    ("POST", "/logout"): "allowed",
    ("POST", "/w/{workspace}/datasets/{dataset}/cases/{case}/approve"): "reviewers-review",
    ("POST", "/w/{workspace}/datasets/{dataset}/cases/{case}/reject"): "reviewers-review",
    ("POST", "/w/{workspace}/datasets/{dataset}/cases/{case}/comments"): "allowed",
    ("POST", "/w/{workspace}/agents/{agent}/mappings"): "shared-writers-write",
    ("POST", "/w/{workspace}/agents/{agent}/mappings/{version}/activate"): "shared-writers-write",
    ("POST", "/admin/users"): "admin-only",
    ("POST", "/admin/users/{username}/disable"): "admin-only",
    ("POST", "/admin/users/{username}/enable"): "admin-only",
    ("POST", "/admin/workspaces"): "admin-only",
    ("POST", "/admin/workspaces/{workspace}/members"): "admin-only",
    ("POST", "/admin/workspaces/{workspace}/members/{username}/remove"): "admin-only",
    ("POST", "/admin/promotions"): "admin-only",
    ("POST", "/admin/promotions/{workspace}/remove"): "admin-only",
    ("POST", "/admin/providers"): "admin-only",
    ("POST", "/admin/providers/{provider}/delete"): "admin-only",
    ("POST", "/admin/judge"): "admin-only",
    ("POST", "/admin/judge/clear"): "admin-only",
    ("POST", "/experiments"): "past-access",  # anyone-runs-shared
    ("POST", "/schedules"): "shared-writers-write",
    ("POST", "/schedules/{schedule}/delete"): "shared-writers-write",
    ("POST", "/runs/{run}/labels"): "writers-label",
    ("POST", "/experiments/{experiment}/label"): "writers-label",
}
# The fields each form sends (besides csrf), enough to reach the access check.
FORMS: dict[str, dict[str, str]] = {
    "/w/{workspace}/datasets/{dataset}/cases/{case}/approve": {"version": "1"},
    "/w/{workspace}/datasets/{dataset}/cases/{case}/reject": {"version": "1"},
    "/w/{workspace}/datasets/{dataset}/cases/{case}/comments": {"text": "looks right"},
    "/w/{workspace}/agents/{agent}/mappings": {"mapping": "{}"},
    "/admin/users": {"username": "mallory"},
    "/admin/workspaces": {"name": "evil"},
    "/admin/workspaces/{workspace}/members": {"username": "reed", "role": "writer"},
    "/admin/promotions": {"source": "dev", "target": "reed"},
    "/admin/providers": {"name": "evil", "base_url": PUBLIC_URL},
    "/admin/judge": {"provider": "evil", "model": "m"},
    "/experiments": {"dataset": "finance@dev", "agent": "bot@dev", "split": "none-such"},
    "/schedules": {"dataset": "finance@dev", "agent": "bot@dev", "cron": "0 3 * * *"},
    "/runs/{run}/labels": {"name": "exact_match", "value": "1"},
    "/experiments/{experiment}/label": {"run": "{run}", "name": "exact_match", "value": "1"},
}


@dataclass
class Site:
    server: RunningServer
    params: dict[str, str]
    sessions: dict[str, str] = field(default_factory=dict)
    """username -> a session token the tests share."""

    def path(self, template: str) -> str:
        return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: self.params[m[1]], template)

    def form(self, path: str) -> dict[str, str]:
        """The fields ``path``'s form sends, with ids such as ``{run}`` filled in."""
        return {key: self.path(value) for key, value in FORMS.get(path, {}).items()}


@pytest.fixture(scope="module")
def site(pg_admin_url, template_url, tmp_path_factory) -> Iterator[Site]:
    def configure(settings):
        settings.auth.token_ttl_hours = TTL_HOURS

    with module_server(pg_admin_url, tmp_path_factory.mktemp("web"), configure=configure) as s:
        # Users reach it over https, through a proxy that ends TLS (the test talks to the
        # edge behind it). Set once the server runs: its test URL is the edge's own.
        s.settings.server.public_url = "https://evalkit.example"
        yield seed(s)


def seed(server: RunningServer) -> Site:
    admin = Api(server, login(server, "admin", ADMIN_PASSWORD))
    admin.ok("POST", "/api/users", json={"username": "reed", "password": READER_PASSWORD})
    admin.ok("POST", "/api/workspaces", json={"name": "dev"})
    case = {"id": "c1", "content": {"input": {"question": XSS}, "expected": {"answer": XSS}}}
    admin.ok("POST", "/api/workspaces/dev/datasets/finance/sync", json={"cases": [case]})
    admin.ok("POST", "/api/workspaces/dev/cases/c1/comments", json={"text": XSS})
    mapping = load_starter("openinference")
    bot = {"name": "bot", "harness_url": PUBLIC_URL, "mapping": mapping}
    admin.ok("POST", "/api/workspaces/dev/agents", json=bot)
    admin.ok("POST", "/api/workspaces/dev/agents", json={"name": "coder", "mapping": mapping})
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": XSS, "startTimeUnixNano": "1"}
    span["attributes"] = [
        {"key": "session.id", "value": {"stringValue": "s1"}},
        {"key": "input.value", "value": {"stringValue": XSS}},
        {"key": "output.value", "value": {"stringValue": XSS}},
    ]
    admin.ok(
        "POST",
        "/api/otel/v1/traces",
        headers={"X-Evalkit-Agent": "bot@dev"},
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
    )
    experiment = admin.ok(
        "POST",
        "/api/experiments",
        json={"dataset": "finance@dev", "agent": "coder@dev", "sdk": True},
    )
    detail = admin.ok("GET", f"/api/experiments/{experiment['id']}")
    schedule = admin.ok(
        "POST",
        "/api/schedules",
        json={"dataset": "finance@dev", "agent": "bot@dev", "cron": "0 3 * * *"},
    )
    admin.ok(  # a monitor whose rubric must be escaped on its page
        "POST", "/api/monitors", json={"name": "watch", "agent": "bot@dev", "rubric": XSS}
    )
    params = {
        "name": "watch",  # the monitor, /monitors/{workspace}/{name}
        "workspace": "dev",
        "dataset": "finance",
        "case": "c1",
        "agent": "bot",
        "version": "1",
        "session": "s1",
        "rest": "dev/bot/s1",  # the Runs tab's old address, /sessions/{rest:path}
        "page": "concepts",
        "experiment": str(experiment["id"]),
        "other": str(experiment["id"]),
        "run": str(detail["run_list"][0]["id"]),
        "schedule": str(schedule["id"]),
        "username": "reed",
        "provider": "ghost",
    }
    return Site(server, params)


@contextmanager
def browser(
    site: Site, username: str | None = None, password: str = "", *, fresh: bool = False
) -> Iterator[httpx.Client]:
    """A browser, logged in as ``username`` if given: through the login form the first
    time, then with the same session (a password hash per test would double the time);
    ``fresh`` logs in anew, for a test that ends its session."""
    with httpx.Client(base_url=site.server.url, follow_redirects=False, timeout=30) as client:
        if username is not None:
            token = None if fresh else site.sessions.get(username)
            if token is None:
                r = client.post("/login", data={"username": username, "password": password})
                assert r.status_code == 303, r.text
                token = r.cookies[SESSION_COOKIE]
                if not fresh:
                    site.sessions[username] = token
            # The cookie is Secure (public_url is https): httpx would send it only to https
            # URLs, so the test sends it by hand over its plain HTTP.
            client.cookies.clear()
            client.headers["cookie"] = f"{SESSION_COOKIE}={token}"
            client.headers["x-test-session"] = token  # for csrf_for below
        yield client


def csrf_for(client: httpx.Client) -> str:
    return csrf_value(client.headers["x-test-session"])


def as_admin(site: Site, *, fresh: bool = False):
    return browser(site, "admin", ADMIN_PASSWORD, fresh=fresh)


def as_reader(site: Site, *, fresh: bool = False):
    return browser(site, "reed", READER_PASSWORD, fresh=fresh)


# --------------------------------------------------------------------------- the pages


def test_every_page_is_classified():
    pages = {(p.method, p.path) for p in PAGES}
    assert {(p.method, p.path) for p in PAGES if p.public} == PUBLIC_PAGES
    posts = {page for page in pages if page[0] == "POST"} - PUBLIC_PAGES
    assert posts == READER_POSTS.keys(), "classify the new POST pages in READER_POSTS"


@pytest.mark.parametrize(
    "page", [p for p in PAGES if not p.public], ids=lambda p: f"{p.method} {p.path}"
)
def test_anonymous_callers_are_sent_to_login(site, page):
    with browser(site) as client:
        r = client.request(page.method, site.path(page.path))
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert location.startswith("/login")
    if page.method == "GET":
        assert location.startswith("/login?next=%2F")


@pytest.mark.parametrize("page", sorted(READER_POSTS), ids=lambda p: p[1])
def test_posts_without_the_session_s_csrf_value_are_refused(site, page):
    """No value, a made-up one, another session's, and one that is not even ASCII."""
    _, path = page
    with as_admin(site, fresh=True) as other:
        others = csrf_for(other)
    with as_admin(site) as client:
        for sent in (None, "0" * 64, others, "é" * 64, csrf_for(client)[:-1]):
            data = site.form(path)
            if sent is not None:
                data["csrf"] = sent
            r = client.post(site.path(path), data=data)
            assert r.status_code == 403, (sent, r.status_code, r.text[:300])
            assert "<code>csrf</code>" in r.text
            assert client.get("/").status_code == 200, "the session still works"
    # Nothing happened: the user, workspace and provider the forms name do not exist, the
    # schedule is still there, the comment was not added.
    admin = Api(site.server, login(site.server, "admin", ADMIN_PASSWORD))
    users = {u["username"] for u in admin.ok("GET", "/api/users")}
    assert "mallory" not in users
    assert "evil" not in {w["name"] for w in admin.ok("GET", "/api/workspaces")}
    assert admin.ok("GET", f"/api/schedules/{site.params['schedule']}")
    events = admin.ok("GET", "/api/workspaces/dev/cases/c1")["events"]
    assert not [e for e in events if e["comment"] == "looks right" and e["actor"] == "admin"]


@pytest.mark.parametrize("page", sorted(READER_POSTS), ids=lambda p: p[1])
def test_forms_apply_the_api_rules(site, page):
    """With a valid CSRF value, a reader gets what the API would give them."""
    _, path = page
    expected = READER_POSTS[page]
    with as_reader(site, fresh=path == "/logout") as client:
        data = {**site.form(path), "csrf": csrf_for(client)}
        r = client.post(site.path(path), data=data)
    if expected == "allowed":
        assert r.status_code == 303, r.text[:300]
    elif expected == "past-access":
        assert r.status_code == 400, (r.status_code, r.text[:300])
        assert "has no cases to run in split" in r.text
    else:
        assert r.status_code == 403, (r.status_code, r.text[:300])
        assert f"<code>{expected}</code>" in r.text


# --------------------------------------------------------------------------- headers


def _get_pages() -> list:
    return [p for p in PAGES if p.method == "GET"]


@pytest.mark.parametrize("page", _get_pages(), ids=lambda p: p.path)
def test_security_headers_on_every_page(site, page):
    with as_admin(site) as client:
        r = client.get(site.path(page.path))
    assert r.status_code < 500, r.text[:300]
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"
    if r.headers.get("content-type", "").startswith("text/html"):
        csp = r.headers["content-security-policy"]
        assert csp == CONTENT_SECURITY_POLICY
        for directive in (
            "default-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "form-action 'self'",
            "base-uri 'none'",
        ):
            assert directive in csp
        assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
        assert "<script>" not in r.text.replace('<script src="/static/app.js" defer>', "")
    else:
        # 301: the Runs tab's old addresses (/sessions...), moved for good
        assert r.status_code in (301, 302, 303), (r.status_code, r.headers)


def test_security_headers_on_errors_redirects_and_static_files(site):
    with as_admin(site) as client:
        answers = {
            "missing page": client.get("/w/nope"),
            "no such route": client.get("/no/such/page"),
            "static": client.get("/static/app.css"),
        }
    with browser(site) as anonymous:
        answers["redirect"] = anonymous.get("/w/dev")
        answers["login form"] = anonymous.get("/login")
    for what, r in answers.items():
        assert r.headers["x-frame-options"] == "DENY", what
        assert r.headers["x-content-type-options"] == "nosniff", what
        assert r.headers["referrer-policy"] == "no-referrer", what
    assert answers["missing page"].status_code == 404
    assert "frame-ancestors 'none'" in answers["missing page"].headers["content-security-policy"]
    assert "frame-ancestors 'none'" in answers["login form"].headers["content-security-policy"]
    assert answers["static"].headers["content-type"].startswith("text/css")


def test_stored_text_is_shown_escaped(site):
    """A case, a comment, span names and attributes holding markup come back escaped on
    every page that shows them (the CSP would also stop an inline script)."""
    pages = [
        "/w/dev/datasets/finance",
        "/w/dev/datasets/finance/cases/c1",
        "/runs",
        "/runs/dev/bot/s1",
        f"/experiments/{site.params['experiment']}",
        f"/runs/{site.params['run']}",
        "/docs?q=" + XSS,
    ]
    with as_admin(site) as client, browser(site) as anonymous:
        for path in pages:
            r = client.get(path)
            assert r.status_code == 200, (path, r.status_code)
            assert "<script>alert(1)" not in r.text, path
            assert "<img src=x" not in r.text, path
        shown = client.get("/w/dev/datasets/finance/cases/c1").text
        login_page = anonymous.get("/login", params={"next": "/" + XSS}).text
    assert "<script>alert(1)" not in login_page and "<img src=x" not in login_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown


# --------------------------------------------------------------------------- the session


def test_the_session_cookie_flags(site):
    with browser(site) as client:
        r = client.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    parts = {p.strip().split("=")[0].lower(): p.strip() for p in cookie.split(";")}
    assert cookie.startswith(SESSION_COOKIE + "=ekl_")
    assert "httponly" in parts
    assert parts["samesite"].lower() == "samesite=lax"
    assert parts["path"] == "Path=/"
    assert parts["max-age"] == f"Max-Age={TTL_HOURS * 3600}"
    # The public URL is https (TLS ends at a proxy in front): the cookie never goes out
    # over plain HTTP, though the edge itself is spoken to in HTTP.
    assert "secure" in parts


def test_a_plain_http_server_sets_no_secure_cookie(server):
    """Without an https public URL (a laptop, `evalkit try`), a Secure cookie would never
    come back over plain HTTP and nobody could log in."""
    with httpx.Client(base_url=server.url, follow_redirects=False) as client:
        r = client.post("/login", data={"username": "admin", "password": ADMIN_PASSWORD})
        assert r.status_code == 303
        assert "secure" not in r.headers["set-cookie"].lower()
        assert client.get("/").status_code == 200


def test_a_logged_out_session_is_over(site):
    with as_reader(site, fresh=True) as client:
        token = client.headers["x-test-session"]
        r = client.post("/logout", data={"csrf": csrf_for(client)})
        assert r.status_code == 303
        assert SESSION_COOKIE in r.headers["set-cookie"] and "Max-Age=0" in r.headers["set-cookie"]
        r = client.get("/")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    r = httpx.get(
        f"{site.server.url}/api/auth/whoami", headers={"authorization": f"Bearer {token}"}
    )
    assert r.status_code == 401


def test_a_login_from_another_site_is_refused(site):
    """Login CSRF: another site's page posting the login form would log the visitor in
    as the attacker. Browsers say where a request comes from (Sec-Fetch-Site)."""
    form = {"username": "reed", "password": READER_PASSWORD}
    with browser(site) as client:
        for where in ("cross-site", "same-site"):
            r = client.post("/login", data=form, headers={"sec-fetch-site": where})
            assert r.status_code == 403, (where, r.status_code)
            assert SESSION_COOKIE not in r.headers.get("set-cookie", "")
        for where in ("same-origin", "none"):
            r = client.post("/login", data=form, headers={"sec-fetch-site": where})
            assert r.status_code == 303, (where, r.status_code)
        assert client.post("/login", data=form).status_code == 303  # not a browser


# --------------------------------------------------------------------------- redirects

OFF_SITE = [
    "https://evil.example/",
    "http:evil.example",
    "//evil.example/x",
    "///evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r\n/evil.example",
    " //evil.example",
    "javascript:alert(1)",
    "data:text/html,hi",
]


@pytest.mark.parametrize("target", OFF_SITE)
def test_safe_next_keeps_every_target_on_the_server(target):
    kept = safe_next(target)
    assert kept == "/" or (kept.startswith("/") and not kept.startswith("//")), kept
    # What a browser makes of it: tabs and newlines are dropped from URLs (WHATWG).
    browser_sees = re.sub(r"[\t\n\r]", "", kept)
    assert not browser_sees.startswith("//") and "\\" not in browser_sees, kept


@pytest.mark.parametrize("target", OFF_SITE)
def test_login_never_redirects_off_the_server(site, target):
    with browser(site) as client:
        r = client.post(
            "/login",
            data={"username": "reed", "password": READER_PASSWORD, "next": target},
        )
    assert r.status_code == 303 and r.headers["location"] == "/", r.headers["location"]
    # Logged in already, the login page sends on to `next` as well.
    with as_reader(site) as client:
        r = client.get("/login", params={"next": target})
    assert r.status_code == 303 and r.headers["location"] == "/", r.headers["location"]


def test_login_goes_back_to_a_path_on_the_server(site):
    with browser(site) as client:
        r = client.post(
            "/login",
            data={"username": "reed", "password": READER_PASSWORD, "next": "/w/dev?x=1"},
        )
    assert r.status_code == 303 and r.headers["location"] == "/w/dev?x=1"


def test_a_sign_in_coming_back_with_any_state_is_answered(site):
    """The state that comes back from the identity provider is compared in constant time
    with the one the flow cookie holds, whatever characters either side has (a non-ASCII
    state was a 500)."""
    import base64
    import json

    from evalkit.web.pages.sso import FLOW_COOKIE

    flow = {"state": "expected-state", "nonce": "n", "verifier": "v", "next": "/"}
    cookie = base64.urlsafe_b64encode(json.dumps(flow).encode()).decode()
    with browser(site) as client:
        for state in ("é" * 14, "expected-stat", "expected-state\x00", ""):
            r = client.get(
                "/login/sso/callback",
                params={"state": state, "code": "c"},
                headers={"cookie": f"{FLOW_COOKIE}={cookie}"},
            )
            assert r.status_code == 400, (state, r.status_code, r.text[:200])
            assert "state does not match" in r.text
            assert SESSION_COOKIE not in r.headers.get("set-cookie", "")
