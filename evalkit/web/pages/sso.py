"""Web sign-in through the identity provider: authorization code with PKCE.

``/login/sso`` makes a state, a nonce and a PKCE verifier, keeps them in a short-lived
cookie scoped to the callback, and sends the browser to the provider. The provider sends it
back to ``/login/sso/callback`` with a code; the state must match the cookie's, the code is
redeemed with the verifier (and the client secret), the ID token's nonce must match, and
the user (created at the first sign-in) gets the same session cookie as a password login.
"""

from __future__ import annotations

import base64
import json
import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from evalkit.auth import oidc
from evalkit.auth.pkce import pkce_pair
from evalkit.auth.tokens import values_match
from evalkit.errors import ApiError
from evalkit.store import accounts, identities
from evalkit.web.page import Page, WebCall, cookies_secure, safe_next, set_session

FLOW_COOKIE = "evalkit_sso"
FLOW_PATH = "/login/sso"
FLOW_SECONDS = 600
"""How long a started sign-in may take at the provider."""


def sso_enabled(call: WebCall) -> bool:
    """Whether the login page offers "Log in with SSO"."""
    return call.settings.auth.oidc is not None


def callback_url(request: Request) -> str:
    public = request.app.state.settings.server.public_url
    base = public.rstrip("/") if public else str(request.base_url).rstrip("/")
    return f"{base}{FLOW_PATH}/callback"


def _encode(flow: dict[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(flow).encode()).decode()


def _decode(raw: str | None) -> dict[str, str] | None:
    if not raw:
        return None
    try:
        flow = json.loads(base64.urlsafe_b64decode(raw.encode()))
    except (ValueError, TypeError):
        return None
    keys = {"state", "nonce", "verifier", "next"}
    if not isinstance(flow, dict) or set(flow) != keys:
        return None
    if not all(isinstance(v, str) for v in flow.values()):
        return None
    return flow


def _login_again(call: WebCall, message: str, status: int = 400) -> Response:
    response = call.render(
        "login.html",
        status=status,
        next="/",
        error=message,
        username="",
        sso=sso_enabled(call),
    )
    response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH)
    return response


async def sso_start(call: WebCall) -> Response:
    provider = oidc.provider_for(call.settings.auth.oidc, call.request.app.state)
    verifier, challenge = pkce_pair()
    flow = {
        "state": secrets.token_urlsafe(24),
        "nonce": secrets.token_urlsafe(24),
        "verifier": verifier,
        "next": safe_next(call.request.query_params.get("next")),
    }
    url = await provider.authorization_url(
        redirect_uri=callback_url(call.request),
        state=flow["state"],
        nonce=flow["nonce"],
        code_challenge=challenge,
    )
    response = RedirectResponse(url, 303)
    response.set_cookie(
        FLOW_COOKIE,
        _encode(flow),
        max_age=FLOW_SECONDS,
        path=FLOW_PATH,
        httponly=True,
        samesite="lax",  # sent on the provider's top-level redirect back to us
        secure=cookies_secure(call.request),
    )
    return response


async def sso_callback(call: WebCall) -> Response:
    params = call.request.query_params
    flow = _decode(call.request.cookies.get(FLOW_COOKIE))
    if flow is None:
        return _login_again(
            call, "The sign-in took too long or started in another browser; try again."
        )
    if params.get("error"):
        # Shown even without a matching state (some providers leave it out of errors):
        # nothing is signed in on this path.
        reason = params["error"]
        return _login_again(call, f"The identity provider did not sign you in: {reason}.", 401)
    if not values_match(params.get("state", ""), flow["state"]):
        return _login_again(call, "The sign-in's state does not match; start it again.")
    code = params.get("code")
    if not code:
        return _login_again(call, "The identity provider sent no code back; try again.")
    settings = call.settings.auth
    provider = oidc.provider_for(settings.oidc, call.request.app.state)
    try:
        claims = await provider.redeem_code(
            code=code,
            code_verifier=flow["verifier"],
            redirect_uri=callback_url(call.request),
            nonce=flow["nonce"],
        )
        async with call.db.transaction() as conn:
            user = await identities.sign_in(conn, claims, settings.oidc.username_claim)
            session = await accounts.issue_login_token(conn, user, settings.token_ttl_hours)
    except ApiError as exc:
        return _login_again(call, exc.message, exc.status)
    response = RedirectResponse(flow["next"], 303)
    set_session(response, call.request, session.token, settings.token_ttl_hours * 3600)
    response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH)
    return response


PAGES = [
    Page("GET", FLOW_PATH, sso_start, public=True),
    Page("GET", f"{FLOW_PATH}/callback", sso_callback, public=True),
]
