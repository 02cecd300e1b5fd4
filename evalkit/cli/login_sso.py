"""Single sign-on from the CLI.

People: ``evalkit login`` signs in through the server's identity provider. With the device
flow (when the provider offers it) the CLI prints a code to enter on any device; otherwise
it opens the browser on the provider and catches the redirect on a loopback port
(``http://127.0.0.1:<port>/callback``, RFC 8252). Either way the server redeems what the
provider sent and answers with an ordinary evalkit login token, stored like a password
login's.

Machines: with ``EVALKIT_OIDC_CLIENT_ID`` and ``EVALKIT_OIDC_CLIENT_SECRET`` set, every
command gets an access token from the provider by client credentials and sends it as its
Bearer token; nothing is stored. The server maps the token's subject to the user bound with
``evalkit users add NAME --subject SUB``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import msgspec

from evalkit.cli.output import CliError, note, say
from evalkit.model import api
from evalkit.model import sso as wire

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from evalkit.cli.client import Client

CLIENT_ID_ENV = "EVALKIT_OIDC_CLIENT_ID"
CLIENT_SECRET_ENV = "EVALKIT_OIDC_CLIENT_SECRET"
NO_BROWSER_ENV = "EVALKIT_NO_BROWSER"
LOGIN_TIMEOUT_SECONDS = 300.0
CALLBACK_PATH = "/callback"

_machine_tokens: dict[str, tuple[str, float]] = {}


def sso_info(base_url: str) -> wire.SsoInfo:
    """The server's answer about single sign-on (no login needed)."""
    try:
        response = httpx.get(f"{base_url}/api/auth/sso", timeout=30.0)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the evalkit server at {base_url}: {exc!r}") from None
    if response.status_code == 404:
        return wire.SsoInfo(enabled=False)  # a server from before single sign-on
    if response.status_code != 200:
        raise CliError(
            f"the server could not say how to sign in ({response.status_code}): "
            f"{response.text[:300]}"
        )
    return msgspec.json.decode(response.content, type=wire.SsoInfo)


def machine_credentials() -> tuple[str, str] | None:
    client_id = os.environ.get(CLIENT_ID_ENV)
    secret = os.environ.get(CLIENT_SECRET_ENV)
    if not client_id and not secret:
        return None
    if not client_id or not secret:
        missing = CLIENT_SECRET_ENV if client_id else CLIENT_ID_ENV
        raise CliError(f"{missing} is not set; a machine login needs both it and the other one")
    return client_id, secret


def client_credentials_token(base_url: str) -> str:
    """An access token for the machine client named by the environment, fetched from the
    server's identity provider, reused until shortly before it expires."""
    creds = machine_credentials()
    assert creds is not None
    cached = _machine_tokens.get(base_url)
    if cached and cached[1] > time.time() + 30:
        return cached[0]
    info = sso_info(base_url)
    if not info.enabled or not info.token_endpoint:
        raise CliError(
            f"{CLIENT_ID_ENV} is set but {base_url} has no single sign-on; unset it and log "
            "in with the machine user's password (`evalkit login --username NAME` with "
            "EVALKIT_PASSWORD)"
        )
    client_id, secret = creds
    form = {"grant_type": "client_credentials"}
    if info.audience:
        form["audience"] = info.audience
    try:
        response = httpx.post(
            info.token_endpoint, data=form, auth=(client_id, secret), timeout=30.0
        )
    except httpx.HTTPError as exc:
        raise CliError(
            f"cannot reach the identity provider at {info.token_endpoint}: {exc!r}"
        ) from None
    try:
        token = response.json()
    except ValueError:
        token = None
    if not isinstance(token, dict):
        raise CliError(
            f"the identity provider answered {response.status_code} at {info.token_endpoint} "
            "with something that is not JSON"
        )
    if response.status_code != 200:
        reason = token.get("error_description") or token.get("error") or response.status_code
        raise CliError(
            f"the identity provider {info.issuer} refused the client credentials of "
            f"{client_id}: {reason}; check {CLIENT_ID_ENV} and {CLIENT_SECRET_ENV}"
        )
    access = token.get("access_token")
    if not isinstance(access, str):
        raise CliError(f"the identity provider {info.issuer} answered without an access token")
    expires_at = time.time() + float(token.get("expires_in") or 300)
    _machine_tokens[base_url] = (access, expires_at)
    return access


def login(client: Client, info: wire.SsoInfo, *, device: bool | None = None) -> api.Session:
    """Sign in a person; ``device`` forces (True) or avoids (False) the device flow; by
    default it is used when the provider offers it."""
    use_device = info.device_flow if device is None else device
    if use_device:
        if not info.device_flow:
            raise CliError(
                f"the identity provider {info.issuer} offers no device flow; run "
                "`evalkit login --sso` without --device on a machine with a browser"
            )
        return device_login(client)
    return browser_login(client, info)


def device_login(client: Client) -> api.Session:
    start: wire.DeviceStart = client.post("/api/auth/sso/device", type=wire.DeviceStart)
    say(f"To sign in, open {start.verification_uri} and enter the code {start.user_code}")
    if start.verification_uri_complete:
        note(f"or open {start.verification_uri_complete}")
    interval = max(1, start.interval)
    deadline = time.monotonic() + start.expires_in
    while time.monotonic() < deadline:
        time.sleep(interval)
        answer: wire.DeviceLogin = client.post(
            "/api/auth/sso/device/poll",
            wire.DevicePoll(device_code=start.device_code),
            type=wire.DeviceLogin,
        )
        if answer.status == "done":
            assert answer.session is not None
            return answer.session
        if answer.status == "slow_down":
            interval += 5
    raise CliError("the sign-in code expired before it was entered; run `evalkit login` again")


class _Callback:
    """What the loopback server received: the query of the provider's redirect."""

    def __init__(self) -> None:
        self.params: dict[str, str] | None = None
        self.done = threading.Event()


def _handler(box: _Callback) -> type[BaseHTTPRequestHandler]:
    # Imported here, not at the top: every command that talks to a server imports this
    # module, and only a browser login needs a loopback server.
    import html
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path != CALLBACK_PATH:
                self.send_error(404)
                return
            box.params = {k: v[0] for k, v in parse_qs(parts.query).items()}
            ok = "code" in box.params
            text = (
                "Signed in to evalkit. You can close this tab and go back to the terminal."
                if ok
                else f"The sign-in failed: {box.params.get('error', 'no code came back')}."
            )
            body = f"<!doctype html><title>evalkit</title><p>{html.escape(text)}</p>".encode()
            self.send_response(200 if ok else 400)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            box.done.set()

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def browser_login(client: Client, info: wire.SsoInfo) -> api.Session:
    """Authorization code + PKCE with a loopback redirect."""
    import secrets
    import webbrowser
    from http.server import HTTPServer

    from evalkit.auth.pkce import pkce_pair
    from evalkit.auth.tokens import values_match

    assert info.authorization_endpoint and info.client_id
    box = _Callback()
    server = HTTPServer(("127.0.0.1", 0), _handler(box))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.daemon = True
    thread.start()
    try:
        redirect_uri = f"http://127.0.0.1:{server.server_address[1]}{CALLBACK_PATH}"
        verifier, challenge = pkce_pair()
        nonce, state = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        query = urlencode(
            {
                "response_type": "code",
                "client_id": info.client_id,
                "redirect_uri": redirect_uri,
                "scope": " ".join(info.scopes),
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        endpoint = info.authorization_endpoint
        url = endpoint + ("&" if "?" in endpoint else "?") + query
        note(f"Sign in at {info.issuer} in your browser. If none opened, open:\n{url}")
        if not os.environ.get(NO_BROWSER_ENV):
            webbrowser.open(url)
        if not box.done.wait(LOGIN_TIMEOUT_SECONDS):
            raise CliError(
                f"no sign-in came back within {int(LOGIN_TIMEOUT_SECONDS)} seconds; run "
                "`evalkit login` again (on a machine without a browser, ask the admin about "
                "the device flow)"
            )
    finally:
        server.shutdown()
        server.server_close()
    params = box.params or {}
    if not values_match(params.get("state") or "", state):
        raise CliError("the sign-in's state did not match; run `evalkit login` again")
    if "code" not in params:
        reason = params.get("error_description") or params.get("error") or "no code"
        raise CliError(f"the identity provider did not sign you in: {reason}")
    return client.post(
        "/api/auth/sso/exchange",
        wire.SsoCodeExchange(
            code=params["code"], code_verifier=verifier, redirect_uri=redirect_uri, nonce=nonce
        ),
        type=api.Session,
    )
