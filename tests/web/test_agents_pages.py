"""The agent page and its span mapping versions: over HTTP (what a reader and a writer see,
refusals, a bad draft keeps the text) and in a real browser (edit a draft, activate it)."""

from __future__ import annotations

import json
import re

import httpx

from evalkit.otel.mapping import load_starter
from tests.integration.datasets_helpers import add_user, admin_api
from tests.web.test_pages_http import csrf_of, logged_in

AGENT = "/w/dev/agents/bot"


def seed(server, admin_token: str) -> dict[str, str]:
    """bot@dev reads OpenInference traces: v1 active, v2 a draft; two tokens, one revoked."""
    admin_api(server, admin_token, "POST", "/api/workspaces", json={"name": "dev"})
    people = {
        "writer": add_user(server, admin_token, "wendy", member_of="dev"),
        "reader": add_user(server, admin_token, "rita"),
    }
    admin_api(
        server,
        admin_token,
        "POST",
        "/api/workspaces/dev/agents",
        json={
            "name": "bot",
            "harness_url": "http://203.0.113.10:8700",
            "api_key": "sk-secret-value",
            "api_key_env": "BOT_KEY",
            "trajectory_source": "otel",
            "mapping": load_starter("openinference"),
            "provides": {"trajectory": True, "thinking": False},
        },
    )
    draft = {**load_starter("openinference"), "session_id": ["session.id", "bot.session"]}
    admin_api(
        server,
        admin_token,
        "POST",
        "/api/workspaces/dev/agents/bot/mappings",
        json={"mapping": draft},
    )
    for note in ("laptop", "ci"):
        admin_api(
            server,
            admin_token,
            "POST",
            "/api/workspaces/dev/agents/bot/tokens",
            json={"note": note},
        )
    admin_api(server, admin_token, "POST", "/api/tokens/1/revoke")
    return people


def states(server, token: str) -> dict[int, str]:
    r = httpx.get(
        f"{server.url}/api/workspaces/dev/agents/bot/mappings",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    return {v["version"]: v["state"] for v in r.json()}


def test_agent_page_shows_settings_tokens_and_versions(server, admin_token):
    seed(server, admin_token)
    with logged_in(server, "rita", "rita-password") as client:
        html = client.get(AGENT).text
    assert "http://203.0.113.10:8700" in html
    assert "stored (never shown), read from <code>$BOT_KEY</code>" in html
    assert "sk-secret-value" not in html
    assert "1 active token, 1 revoked" in html
    assert re.search(r"<code>trajectory</code> — <span class=\"state s-pass\">yes", html)
    assert re.search(r"<code>thinking</code> — <span class=\"state s-fail\">no", html)
    assert re.search(r"<code>workspace</code> — <span class=\"muted\">not declared", html)
    assert "active</span> <strong>← in use</strong>" in html
    assert "read-only" in html and "Activate v" not in html and "/mappings/new" not in html


def test_reader_cannot_edit_or_activate(server, admin_token):
    seed(server, admin_token)
    with logged_in(server, "rita", "rita-password") as client:
        page = client.get(f"{AGENT}/mappings/2").text
        assert "<textarea" not in page and "Activate v2" not in page
        assert "bot.session" in page  # the mapping itself is readable
        csrf = csrf_of(page)
        refused = client.post(f"{AGENT}/mappings/2/activate", data={"csrf": csrf})
        assert refused.status_code == 403
        assert "rita is not a writer of @dev" in refused.text
        refused = client.post(
            f"{AGENT}/mappings", data={"csrf": csrf, "mapping": "not json", "based_on": "2"}
        )
        assert refused.status_code == 403 and "shared-writers-write" in refused.text
    assert states(server, admin_token) == {1: "active", 2: "draft"}


def test_writer_saves_a_draft_and_a_mistake_keeps_the_text(server, admin_token):
    seed(server, admin_token)
    with logged_in(server, "wendy", "wendy-password") as client:
        page = client.get(f"{AGENT}/mappings/2").text
        assert "Activate v2" in page and "<textarea" in page
        csrf = csrf_of(page)
        bad = client.post(
            f"{AGENT}/mappings", data={"csrf": csrf, "mapping": '{"format": 1,', "based_on": "2"}
        )
        assert bad.status_code == 400
        assert "the mapping is not JSON" in bad.text
        assert "{&#34;format&#34;: 1,</textarea>" in bad.text  # what was typed, not lost
        broken = client.post(
            f"{AGENT}/mappings", data={"csrf": csrf, "mapping": '{"format": 9}', "based_on": "2"}
        )
        assert broken.status_code == 400 and "the span mapping has" in broken.text
        text = json.dumps({**load_starter("genai")})
        saved = client.post(f"{AGENT}/mappings", data={"csrf": csrf, "mapping": text})
        assert saved.status_code == 303
        assert saved.headers["location"] == f"{AGENT}/mappings/3?done=saved"
        new = client.get(f"{AGENT}/mappings/new?starter=genai")
        assert new.status_code == 200 and "New span mapping" in new.text
        assert client.get(f"{AGENT}/mappings/new?starter=nope").status_code == 400
    assert states(server, admin_token) == {1: "active", 2: "draft", 3: "draft"}


def test_activate_a_mapping_in_the_browser(server, admin_token, page, log_in):
    seed(server, admin_token)
    log_in(server.url, "wendy", "wendy-password")
    page.get_by_role("link", name="dev", exact=True).click()
    page.get_by_role("link", name="bot", exact=True).click()
    page.wait_for_url(f"{server.url}{AGENT}")
    page.shot("agent")
    page.get_by_role("link", name="v2", exact=True).first.click()
    page.wait_for_url(f"{server.url}{AGENT}/mappings/2")
    editor = page.get_by_label(re.compile("^Mapping \\(JSON\\)"))
    edited = json.loads(editor.input_value())
    edited["session_id"] = ["session.id", "bot.session", "conversation.id"]
    editor.fill(json.dumps(edited, indent=2))
    page.shot("draft-edited")
    page.get_by_role("button", name="Save as a new draft").click()
    page.wait_for_url(f"{server.url}{AGENT}/mappings/3?done=saved")
    assert "draft" in page.get_by_role("heading", level=1).inner_text()
    page.get_by_role("button", name="Activate v3").click()
    page.wait_for_url(f"{server.url}{AGENT}/mappings/3?done=activated")
    assert page.get_by_role("status").inner_text().startswith("Activated")
    assert "active" in page.get_by_role("heading", level=1).inner_text()
    page.shot("activated")
    page.get_by_role("link", name="bot", exact=True).click()
    assert "← in use" in page.get_by_role("row", name=re.compile(r"^v3 ")).inner_text()
    assert page.get_by_role("row", name=re.compile(r"^v1 retired")).is_visible()
    assert page.get_by_role("button", name="Activate v1").is_visible()
    page.shot("agent-after")
    assert states(server, admin_token) == {1: "retired", 2: "draft", 3: "active"}


def test_agent_pages_fit_a_phone(server, admin_token, page, log_in):
    seed(server, admin_token)
    log_in(server.url, "wendy", "wendy-password")
    page.set_viewport_size({"width": 390, "height": 800})
    for path in (AGENT, f"{AGENT}/mappings/2", f"{AGENT}/mappings/new"):
        page.goto(server.url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a phone screen"
    page.goto(server.url + AGENT)
    page.shot("agent-phone")
