"""Single sign-on for the CLI: what the server's identity provider is, and the two ways a
CLI login ends in an evalkit login token (a loopback redirect's code, or the device flow).

The server keeps the client secret: the CLI hands it the code (with its PKCE verifier) or
the device code, and the server redeems it at the provider, checks the ID token, finds or
creates the user, and answers with an ordinary login token. (The web login is in
``evalkit/web/pages/sso.py``.)
"""

from __future__ import annotations

from typing import Any

from evalkit.auth import oidc
from evalkit.edge.endpoint import Call, Endpoint
from evalkit.errors import BadGateway
from evalkit.model import api
from evalkit.model import sso as wire
from evalkit.store import accounts, identities


def provider(call: Call) -> oidc.Provider:
    return oidc.provider_for(call.settings.auth.oidc, call.request.app.state)


async def session_for(call: Call, claims: dict[str, Any]) -> api.Session:
    """An evalkit login token for a checked ID token's user (created at the first sign-in)."""
    settings = call.settings.auth
    async with call.db.transaction() as conn:
        user = await identities.sign_in(conn, claims, settings.oidc.username_claim)
        return await accounts.issue_login_token(conn, user, settings.token_ttl_hours)


async def sso_info(call: Call) -> wire.SsoInfo:
    settings = call.settings.auth.oidc
    if settings is None:
        return wire.SsoInfo(enabled=False)
    found = provider(call)
    meta = await found.metadata()
    return wire.SsoInfo(
        enabled=True,
        issuer=found.issuer,
        client_id=settings.client_id,
        scopes=list(settings.scopes),
        authorization_endpoint=meta["authorization_endpoint"],
        token_endpoint=meta["token_endpoint"],
        device_flow=isinstance(meta.get("device_authorization_endpoint"), str),
        audience=settings.audience,
    )


async def sso_exchange(call: Call) -> api.Session:
    body: wire.SsoCodeExchange = await call.payload()
    claims = await provider(call).redeem_code(
        code=body.code,
        code_verifier=body.code_verifier,
        redirect_uri=body.redirect_uri,
        nonce=body.nonce,
    )
    return await session_for(call, claims)


async def sso_device_start(call: Call) -> wire.DeviceStart:
    raw = await provider(call).device_start()
    try:
        return wire.DeviceStart(
            device_code=str(raw["device_code"]),
            user_code=str(raw["user_code"]),
            verification_uri=str(raw.get("verification_uri") or raw["verification_url"]),
            verification_uri_complete=raw.get("verification_uri_complete"),
            expires_in=int(raw["expires_in"]),
            interval=int(raw.get("interval", 5)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadGateway(
            f"the identity provider's device authorization answer lacks {exc}"
        ) from None


async def sso_device_poll(call: Call) -> wire.DeviceLogin:
    body: wire.DevicePoll = await call.payload()
    outcome = await provider(call).device_poll(body.device_code)
    if isinstance(outcome, str):
        return wire.DeviceLogin(status=outcome)  # type: ignore[arg-type]
    return wire.DeviceLogin(status="done", session=await session_for(call, outcome))


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/auth/sso",
        sso_info,
        "Whether single sign-on is on, and the identity provider a CLI signs in with",
        returns=wire.SsoInfo,
        public=True,
        tags=["auth"],
        refusals=(502,),  # the provider's metadata
    ),
    Endpoint(
        "POST",
        "/api/auth/sso/exchange",
        sso_exchange,
        "Finish a CLI sign-in: redeem the code from the loopback redirect for a login token",
        body=wire.SsoCodeExchange,
        returns=api.Session,
        public=True,
        tags=["auth"],
        refusals=(401, 403, 502),  # the code or ID token refused; the user; the provider
    ),
    Endpoint(
        "POST",
        "/api/auth/sso/device",
        sso_device_start,
        "Start a device-flow sign-in: a code for the user to enter at the provider",
        returns=wire.DeviceStart,
        public=True,
        tags=["auth"],
        refusals=(502,),
    ),
    Endpoint(
        "POST",
        "/api/auth/sso/device/poll",
        sso_device_poll,
        "Ask whether a device-flow sign-in finished; answers a login token when it has",
        body=wire.DevicePoll,
        returns=wire.DeviceLogin,
        public=True,
        tags=["auth"],
        refusals=(401, 403, 502),
    ),
]
