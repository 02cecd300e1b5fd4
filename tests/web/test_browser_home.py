"""In a real browser: log in, see the workspaces, open one, log out."""

from __future__ import annotations


def test_log_in_open_a_workspace_and_log_out(server, page, log_in):
    log_in(server.url)
    assert page.get_by_role("heading", name="Workspaces").is_visible()
    page.shot("workspaces")
    page.get_by_role("link", name="admin", exact=True).click()
    page.wait_for_url(f"{server.url}/w/admin")
    assert page.get_by_role("heading", name="Datasets").is_visible()
    page.shot("workspace")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{server.url}/login")
    page.goto(f"{server.url}/w/admin")
    assert page.url.startswith(f"{server.url}/login?next=")


def test_pages_fit_a_phone_width(server, page, log_in):
    log_in(server.url)
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{server.url}/w/admin")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a phone screen"
    page.shot("phone")
