"""Browser fixtures: Playwright driving Debian's headless Chromium against a real edge.

``.ci/run`` installs ``chromium`` with apt-get when it is missing. Screenshots go to
``test-artifacts/screenshots/`` (or ``$EVALKIT_ARTIFACTS``), one per ``shot()`` call.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ADMIN_PASSWORD

CHROMIUM = Path(os.environ.get("EVALKIT_CHROMIUM", "/usr/bin/chromium"))
# Without the background-networking flags Chromium keeps dialling Google on a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("EVALKIT_ARTIFACTS", "test-artifacts")) / "screenshots"


@pytest.fixture
def chromium_browser() -> Iterator[object]:
    # One browser per test, not per session: sync Playwright keeps an event loop running in
    # the main thread while it is open, and every later asyncio test would then fail with
    # "Runner.run() cannot be called from a running event loop".
    if not CHROMIUM.exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium, "
            "as .ci/run does) or point EVALKIT_CHROMIUM at one"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium_browser, request) -> Iterator[object]:
    """A fresh browser context (no cookies) at 1280 px; ``page.shot(name)`` saves a PNG."""
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    test_name = re.sub(r"[^\w.-]+", "_", request.node.name)

    def shot(name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{test_name}-{name}.png"
        tab.screenshot(path=str(path), full_page=True)
        return path

    tab.shot = shot  # type: ignore[attr-defined]
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture
def log_in(page) -> Callable[..., object]:
    """Log ``page`` in through the login form: ``log_in(server.url, user, password)``."""

    def go(base_url: str, username: str = "admin", password: str = ADMIN_PASSWORD) -> object:
        page.goto(f"{base_url}/login")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{base_url}/")
        return page

    return go
