"""Single sign-on against a real identity provider on loopback (oidc-provider-mock): CLI
logins by loopback redirect and by device flow, machine users by client credentials, and
the token checks (unbound subject, expiry, foreign key, audience, issuer, algorithm)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from tests.conftest import start_server
from tests.integration.datasets_helpers import Repo
from tests.integration.sso_helpers import IDP_WARNINGS, oidc_settings, running_idp

pytestmark = IDP_WARNINGS

CAROL = {"carol-sub": {"preferred_username": "carol"}}


@pytest.fixture
def idp():
    with running_idp(users=CAROL) as running:
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


def browser_that_signs_in_as(sub: str):
    """Stands in for the person at the browser the CLI opens: the provider's sign-in page,
    then the redirect back to the CLI's loopback port."""
    done: dict[str, object] = {}

    def open_browser(url: str) -> bool:
        def run() -> None:
            with httpx.Client(timeout=10) as browser:
                page = browser.get(url)
                assert page.status_code == 200, page.text
                back = browser.post(str(page.url), data={"sub": sub})
                assert back.status_code == 302, back.text
                done["callback"] = browser.get(back.headers["location"]).status_code

        threading.Thread(target=run, daemon=True).start()
        return True

    return open_browser, done


def test_sso_info_is_public_and_off_without_config(server):
    r = httpx.get(f"{server.url}/api/auth/sso")
    assert r.status_code == 200 and r.json()["enabled"] is False


def test_sso_info_names_the_provider(sso_server, idp):
    info = httpx.get(f"{sso_server.url}/api/auth/sso").json()
    assert info["enabled"] is True
    assert info["issuer"] == idp.url and info["client_id"] == "evalkit"
    assert info["authorization_endpoint"] == f"{idp.url}/oauth2/authorize"
    assert info["token_endpoint"] == f"{idp.url}/oauth2/token"
    assert info["device_flow"] is False


def test_cli_login_by_loopback_redirect_creates_the_user(sso_server, cli, monkeypatch):
    open_browser, done = browser_that_signs_in_as("carol-sub")
    monkeypatch.setattr("webbrowser.open", open_browser)
    first = cli("login", sso_server.url, "--json")  # SSO by default: no username given
    assert first.code == 0, first.err
    assert first.json["username"] == "carol" and done["callback"] == 200
    me = cli("whoami", "--json").json
    assert me["user"]["username"] == "carol" and me["personal_workspace"] == "carol"
    # The second sign-in finds the same user by subject.
    again = cli("login", sso_server.url, "--sso", "--json")
    assert again.code == 0 and again.json["username"] == "carol"
    admin = cli("users", "list", "--json").json
    assert [u["username"] for u in admin] == ["admin", "carol"]


def test_cli_login_by_device_flow(database_url, tmp_path, cli):
    with running_idp(device_flow=True, users=CAROL) as idp:

        def configure(settings):
            settings.auth.oidc = oidc_settings(idp)

        server = start_server(database_url, tmp_path, configure=configure)
        try:
            assert httpx.get(f"{server.url}/api/auth/sso").json()["device_flow"] is True

            def person_enters_the_code() -> None:
                deadline = time.monotonic() + 20
                while not idp.devices and time.monotonic() < deadline:
                    time.sleep(0.05)
                (entry,) = idp.devices.values()
                httpx.post(
                    f"{idp.url}/device", data={"user_code": entry["user_code"], "sub": "carol-sub"}
                ).raise_for_status()

            threading.Thread(target=person_enters_the_code, daemon=True).start()
            result = cli("login", server.url, "--sso")
            assert result.code == 0, result.err
            assert "enter the code" in result.out and "logged in" in result.out
            assert cli("whoami", "--json").json["user"]["username"] == "carol"
        finally:
            server.stop()


def test_cli_login_refused_when_username_is_taken(sso_server, cli, monkeypatch, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", sso_server.url)
    assert cli("users", "add", "carol", token=admin_token).code == 0
    open_browser, _ = browser_that_signs_in_as("carol-sub")
    monkeypatch.setattr("webbrowser.open", open_browser)
    refused = cli("login", "--sso")
    assert refused.code == 1
    assert "a user named 'carol' already exists" in refused.err
    assert "evalkit users bind carol --subject carol-sub" in refused.err
    assert cli("users", "bind", "carol", "--subject", "carol-sub", token=admin_token).code == 0
    assert cli("login", "--sso", "--json").json["username"] == "carol"


def test_machine_user_syncs_with_client_credentials(sso_server, idp, cli, admin_token, tmp_path):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", sso_server.url)
    added = cli("users", "add", "ci-bot", "--subject", "ci-client-id", token=admin_token)
    assert added.code == 0 and "bound to the identity-provider subject ci-client-id" in added.out
    assert "password:" not in added.out  # a bound machine user has no password
    cli("workspaces", "create", "dev", token=admin_token)
    cli("workspaces", "members", "add", "dev", "ci-bot", "--role", "writer", token=admin_token)
    idp.machines["ci-client-id"] = "ci-secret"
    cli.monkeypatch.setenv("EVALKIT_OIDC_CLIENT_ID", "ci-client-id")
    cli.monkeypatch.setenv("EVALKIT_OIDC_CLIENT_SECRET", "ci-secret")
    login = cli("login")
    assert login.code == 0 and "as ci-bot with client credentials" in login.out
    assert cli("whoami", "--json").json["user"]["username"] == "ci-bot"
    repo = Repo(tmp_path / "repo")
    repo.case("finance", "refund", question="Refund window?", answer="30 days")
    synced = cli("sync", str(repo.suite("finance")), "--workspace", "dev", "--json")
    assert synced.code == 0, synced.err
    assert synced.json["added"] == ["refund"] and synced.json["actor"] == "ci-bot"
    # Without the client credentials the same call is anonymous and refused.
    cli.monkeypatch.delenv("EVALKIT_OIDC_CLIENT_ID")
    cli.monkeypatch.delenv("EVALKIT_OIDC_CLIENT_SECRET")
    assert cli("whoami").code == 1


def test_unbound_subject_is_refused_naming_the_fix(sso_server, idp, cli):
    idp.machines["stranger"] = "s3"
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", sso_server.url)
    cli.monkeypatch.setenv("EVALKIT_OIDC_CLIENT_ID", "stranger")
    cli.monkeypatch.setenv("EVALKIT_OIDC_CLIENT_SECRET", "s3")
    refused = cli("whoami")
    assert refused.code == 1
    assert "no evalkit user is bound to the subject 'stranger'" in refused.err
    assert "evalkit users add NAME --subject stranger" in refused.err
    assert "[unbound-subject]" in refused.err


def test_wrong_client_secret_is_refused_by_the_provider(sso_server, idp, cli):
    idp.machines["ci"] = "right"
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", sso_server.url)
    cli.monkeypatch.setenv("EVALKIT_OIDC_CLIENT_ID", "ci")
    cli.monkeypatch.setenv("EVALKIT_OIDC_CLIENT_SECRET", "wrong")
    refused = cli("whoami")
    assert refused.code == 1 and "refused the client credentials of ci" in refused.err


def bearer(server, token: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/auth/whoami", headers={"Authorization": f"Bearer {token}"})


def test_token_checks(sso_server, idp, admin_token):
    httpx.post(
        f"{sso_server.url}/api/users",
        json={"username": "ci-bot", "subject": "ci"},
        headers={"Authorization": f"Bearer {admin_token}"},
    ).raise_for_status()
    ok = bearer(sso_server, idp.access_token("ci"))
    assert ok.status_code == 200 and ok.json()["user"]["username"] == "ci-bot"
    logout = httpx.post(
        f"{sso_server.url}/api/auth/logout",
        headers={"Authorization": f"Bearer {idp.access_token('ci')}"},
    )
    assert logout.status_code == 400 and logout.json()["error"]["code"] == "not-revocable"

    def refused(token: str, code: str, words: str) -> None:
        r = bearer(sso_server, token)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == code, r.text
        assert words in r.json()["error"]["message"], r.text

    refused(idp.access_token("ci", ttl=-600), "token-expired", "expired")
    other = RSAKey.generate_key(2048)
    now = int(time.time())
    claims = {"iss": idp.url, "sub": "ci", "aud": "evalkit", "iat": now, "exp": now + 300}
    refused(idp.sign(claims, key=other), "bad-token-signature", "does not verify")
    refused(idp.access_token("ci", aud="someone-else"), "bad-token-audience", "someone-else")
    refused(idp.access_token("ci", iss="https://evil.example"), "bad-token-issuer", "evil")
    hs = jwt.encode({"alg": "HS256"}, claims, OctKey.import_key("k" * 32))
    refused(hs, "bad-token", "'HS256'")
    # A key the issuer does not publish, under a key id it does not know either.
    refused(
        jwt.encode({"alg": "RS256", "kid": "nope"}, claims, other),
        "bad-token-signature",
        "no key 'nope'",
    )


def test_jwt_refused_without_sso(server, idp):
    r = bearer(server, idp.access_token("ci"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "bad-token"
    assert "no single sign-on" in r.json()["error"]["message"]
