"""In a real browser: "Log in with SSO" through the identity provider on loopback
(oidc-provider-mock), authorization code with PKCE, state and nonce; the user is created at
the first sign-in. The password form keeps working beside it."""

from __future__ import annotations

import pytest

from tests.conftest import ADMIN_PASSWORD, start_server
from tests.integration.sso_helpers import IDP_WARNINGS, oidc_settings, running_idp

pytestmark = IDP_WARNINGS


@pytest.fixture
def idp():
    with running_idp(users={"dana-sub": {"preferred_username": "dana"}}) as running:
        yield running


@pytest.fixture
def sso_server(idp, database_url, tmp_path):
    def configure(settings):
        settings.auth.oidc = oidc_settings(idp)

    running = start_server(database_url, tmp_path, configure=configure)
    try:
        yield running
    finally:
        running.stop()


def test_log_in_with_sso_creates_the_user(sso_server, idp, page):
    page.goto(f"{sso_server.url}/w/dana")  # a page that needs a login
    assert page.url.startswith(f"{sso_server.url}/login?next=")
    page.shot("login-with-sso")
    page.get_by_role("link", name="Log in with SSO").click()
    page.wait_for_url(f"{idp.url}/oauth2/authorize*")
    assert "code_challenge_method=S256" in page.url and "nonce=" in page.url
    page.shot("provider")
    page.get_by_role("button", name="dana-sub").click()  # the provider's sign-in
    page.wait_for_url(f"{sso_server.url}/w/dana")
    assert page.get_by_role("heading", name="Datasets").is_visible()
    page.shot("signed-in")
    # Signed out, then in again: the same user, found by subject.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{sso_server.url}/login")
    page.get_by_role("link", name="Log in with SSO").click()
    page.get_by_role("button", name="dana-sub").click()
    page.wait_for_url(f"{sso_server.url}/")
    assert page.get_by_role("heading", name="Workspaces").is_visible()


def test_password_login_beside_sso(sso_server, page, log_in):
    log_in(sso_server.url, "admin", ADMIN_PASSWORD)
    assert page.get_by_role("heading", name="Workspaces").is_visible()


def test_callback_with_a_forged_state_is_refused(sso_server, idp, page):
    page.goto(f"{sso_server.url}/login/sso")
    page.wait_for_url(f"{idp.url}/oauth2/authorize*")
    page.goto(f"{sso_server.url}/login/sso/callback?code=stolen&state=forged")
    assert page.get_by_role("alert").inner_text() == (
        "The sign-in's state does not match; start it again."
    )


def test_denied_at_the_provider(sso_server, idp, page):
    page.goto(f"{sso_server.url}/login/sso")
    page.wait_for_url(f"{idp.url}/oauth2/authorize*")
    page.get_by_role("button", name="Deny").click()
    page.wait_for_url(f"{sso_server.url}/login/sso/callback*")
    assert "did not sign you in: access_denied" in page.get_by_role("alert").inner_text()


def test_no_sso_button_without_sso(server, page):
    page.goto(f"{server.url}/login")
    assert page.get_by_role("link", name="Log in with SSO").count() == 0
