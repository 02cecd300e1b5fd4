"""OpenID Connect against the identity provider named by ``auth.oidc``: discovery, the
provider's signing keys (JWKS), token checks, and the calls that redeem a login.

What is checked on every token (ID tokens from a login, access tokens from machine
clients): a signature by one of the issuer's published keys with an asymmetric algorithm
(never ``none``, never an HMAC), ``iss`` equal to the configured issuer, ``aud`` naming the
expected audience, ``exp``/``nbf``/``iat`` within ``LEEWAY_SECONDS``, a ``sub``, and the
``nonce`` when a login sent one.

Caching: the discovery document for ``METADATA_TTL_SECONDS``; the keys until a token names
a key id the set lacks (or a key-less token fails), then they are fetched again, at most
once per ``JWKS_REFETCH_SECONDS``, so garbage tokens cannot make the server hammer the
provider.

The provider is configured by the server's admin, so its URLs are called directly, outside
the egress policy that guards user-supplied URLs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from joserfc import jws, jwt
from joserfc.errors import BadSignatureError, JoseError
from joserfc.jwk import KeySet

from evalkit.auth.access import Actor
from evalkit.auth.tokens import values_match
from evalkit.config import OidcSettings
from evalkit.db import Database
from evalkit.errors import BadGateway, BadRequest, Unauthorized
from evalkit.store import identities

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
LEEWAY_SECONDS = 60
METADATA_TTL_SECONDS = 3600
JWKS_REFETCH_SECONDS = 30
HTTP_TIMEOUT_SECONDS = 10.0
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON header: our own tokens never look like it."""
    return token.startswith("eyJ") and token.count(".") == 2


@dataclass
class Provider:
    """One configured identity provider, with its cached discovery document and keys."""

    settings: OidcSettings
    transport: httpx.AsyncBaseTransport | None = None
    _metadata: dict[str, Any] | None = None
    _metadata_at: float = 0.0
    _keys: KeySet | None = None
    _keys_at: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def issuer(self) -> str:
        return self.settings.issuer.rstrip("/")

    @property
    def audience(self) -> str:
        """What access tokens must name in ``aud``: ``auth.oidc.audience``, else the
        client id."""
        return self.settings.audience or self.settings.client_id

    # -- discovery and keys -------------------------------------------------------------

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is not None and time.monotonic() - self._metadata_at < (
            METADATA_TTL_SECONDS
        ):
            return self._metadata
        async with self._lock:
            if self._metadata is None or time.monotonic() - self._metadata_at >= (
                METADATA_TTL_SECONDS
            ):
                url = f"{self.issuer}/.well-known/openid-configuration"
                found = await self._get_json(url, "its discovery document")
                if str(found.get("issuer", "")).rstrip("/") != self.issuer:
                    raise BadGateway(
                        f"the identity provider's discovery document at {url} names the issuer "
                        f"{found.get('issuer')!r}, not {self.issuer!r}; set auth.oidc.issuer to "
                        "the exact issuer it announces"
                    )
                for key in ("jwks_uri", "authorization_endpoint", "token_endpoint"):
                    if not isinstance(found.get(key), str):
                        raise BadGateway(
                            f"the identity provider's discovery document at {url} has no {key}"
                        )
                self._metadata, self._metadata_at = found, time.monotonic()
        assert self._metadata is not None
        return self._metadata

    async def keys(self, *, refresh: bool = False) -> KeySet:
        """The provider's signing keys; ``refresh`` fetches them again unless they were
        fetched within JWKS_REFETCH_SECONDS."""
        fresh_enough = time.monotonic() - self._keys_at < JWKS_REFETCH_SECONDS
        if self._keys is not None and (not refresh or fresh_enough):
            return self._keys
        meta = await self.metadata()
        async with self._lock:
            if self._keys is None or (
                refresh and time.monotonic() - self._keys_at >= (JWKS_REFETCH_SECONDS)
            ):
                raw = await self._get_json(meta["jwks_uri"], "its signing keys (JWKS)")
                try:
                    self._keys = KeySet.import_key_set(raw)  # type: ignore[arg-type]
                except (JoseError, ValueError, KeyError, TypeError) as exc:
                    raise BadGateway(
                        f"the identity provider's JWKS at {meta['jwks_uri']} does not parse: {exc}"
                    ) from None
                self._keys_at = time.monotonic()
        assert self._keys is not None
        return self._keys

    async def device_flow(self) -> bool:
        return isinstance((await self.metadata()).get("device_authorization_endpoint"), str)

    # -- token checks -------------------------------------------------------------------

    async def verify(
        self, token: str, *, audience: str, nonce: str | None = None, what: str = "token"
    ) -> dict[str, Any]:
        """The claims of a JWT that passes every check, or Unauthorized naming the check
        it failed."""
        try:
            header = jws.extract_compact(token.encode()).headers()
        except (JoseError, ValueError):
            raise Unauthorized(f"the {what} is not a well-formed JWT", code="bad-token") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Unauthorized(
                f"the {what} is signed with {alg!r}; evalkit accepts only "
                f"{', '.join(ALGORITHMS)} signatures from the identity provider",
                code="bad-token",
            )
        claims = await self._verified_claims(token, header, what)
        self._check_claims(claims, audience=audience, nonce=nonce, what=what)
        return claims

    async def _verified_claims(self, token: str, header: dict[str, Any], what: str) -> Any:
        kid = header.get("kid")
        for refresh in (False, True):
            keyset = await self.keys(refresh=refresh)
            if kid is not None:
                try:
                    candidates = [keyset.get_by_kid(kid)]
                except (JoseError, ValueError, KeyError):
                    candidates = []
            else:
                candidates = list(keyset.keys)
            for key in candidates:
                try:
                    return jwt.decode(token, key, algorithms=[header["alg"]]).claims
                except (BadSignatureError, JoseError, ValueError):
                    continue
        reason = f"no key {kid!r} of" if kid is not None else "none of the keys of"
        raise Unauthorized(
            f"the {what}'s signature does not verify: {reason} the issuer {self.issuer} "
            "(its JWKS) signed it",
            code="bad-token-signature",
        )

    def _check_claims(
        self, claims: dict[str, Any], *, audience: str, nonce: str | None, what: str
    ) -> None:
        now = time.time()
        if str(claims.get("iss", "")).rstrip("/") != self.issuer:
            raise Unauthorized(
                f"the {what} was issued by {claims.get('iss')!r}, not by the configured "
                f"issuer {self.issuer!r}",
                code="bad-token-issuer",
            )
        aud = claims.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        if audience not in audiences:
            raise Unauthorized(
                f"the {what} is for the audience {aud!r}, not {audience!r}; ask the identity "
                "provider for a token with that audience (auth.oidc.audience on the server)",
                code="bad-token-audience",
            )
        exp = claims.get("exp")
        if not isinstance(exp, int | float):
            raise Unauthorized(f"the {what} has no expiry (exp)", code="bad-token")
        if now > exp + LEEWAY_SECONDS:
            raise Unauthorized(
                f"the {what} expired {int(now - exp)} seconds ago; get a new one",
                code="token-expired",
            )
        nbf = claims.get("nbf")
        if isinstance(nbf, int | float) and now + LEEWAY_SECONDS < nbf:
            raise Unauthorized(f"the {what} is not valid before {int(nbf)}", code="bad-token")
        iat = claims.get("iat")
        if isinstance(iat, int | float) and now + LEEWAY_SECONDS < iat:
            raise Unauthorized(f"the {what} claims to be issued in the future", code="bad-token")
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            raise Unauthorized(f"the {what} names no subject (sub)", code="bad-token")
        got = claims.get("nonce")
        if nonce is not None and not (isinstance(got, str) and values_match(got, nonce)):
            raise Unauthorized(
                f"the {what}'s nonce does not match this login's; start the login again",
                code="bad-token-nonce",
            )

    # -- logins -------------------------------------------------------------------------

    async def authorization_url(
        self, *, redirect_uri: str, state: str, nonce: str, code_challenge: str
    ) -> str:
        meta = await self.metadata()
        params = {
            "response_type": "code",
            "client_id": self.settings.client_id,
            "redirect_uri": redirect_uri,
            "scope": " ".join(self.settings.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
        }
        endpoint = meta["authorization_endpoint"]
        return endpoint + ("&" if "?" in endpoint else "?") + urlencode(params)

    async def redeem_code(
        self, *, code: str, code_verifier: str, redirect_uri: str, nonce: str
    ) -> dict[str, Any]:
        """Trade an authorization code for tokens; returns the checked ID token's claims."""
        answer = await self._token_request(
            {
                "grant_type": "authorization_code",
                "code": code,
                "code_verifier": code_verifier,
                "redirect_uri": redirect_uri,
            }
        )
        return await self._id_token_claims(answer, nonce)

    async def device_start(self) -> dict[str, Any]:
        meta = await self.metadata()
        endpoint = meta.get("device_authorization_endpoint")
        if not isinstance(endpoint, str):
            raise BadRequest(
                f"the identity provider {self.issuer} offers no device flow; log in with "
                "`evalkit login --sso` on a machine with a browser (loopback redirect)",
                code="no-device-flow",
            )
        data = {"scope": " ".join(self.settings.scopes)}
        response = await self._post(
            endpoint, data, "its device authorization endpoint", client_auth=True
        )
        body = self._json_body(response, "its device authorization endpoint")
        if response.status_code != 200:
            raise BadGateway(
                f"the identity provider refused to start a device login: {self._oauth_error(body)}"
            )
        return body

    async def device_poll(self, device_code: str) -> dict[str, Any] | str:
        """The ID token's claims once the user approved, else the pending state
        (``authorization_pending`` or ``slow_down``)."""
        meta = await self.metadata()
        response = await self._post(
            meta["token_endpoint"],
            {"grant_type": DEVICE_GRANT, "device_code": device_code},
            "its token endpoint",
            client_auth=True,
        )
        body = self._json_body(response, "its token endpoint")
        if response.status_code != 200:
            error = body.get("error")
            if error in ("authorization_pending", "slow_down"):
                return str(error)
            if error == "access_denied":
                raise Unauthorized("the sign-in was denied at the identity provider", code="denied")
            if error == "expired_token":
                raise Unauthorized(
                    "the device code expired before the sign-in finished; run `evalkit login` "
                    "again",
                    code="device-code-expired",
                )
            raise Unauthorized(
                f"the identity provider refused the device login: {self._oauth_error(body)}",
                code="sso-refused",
            )
        return await self._id_token_claims(body, None)

    async def _id_token_claims(self, answer: dict[str, Any], nonce: str | None) -> dict[str, Any]:
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise BadGateway(
                "the identity provider answered without an ID token; include 'openid' in "
                "auth.oidc.scopes"
            )
        return await self.verify(
            id_token, audience=self.settings.client_id, nonce=nonce, what="ID token"
        )

    async def _token_request(self, data: dict[str, str]) -> dict[str, Any]:
        meta = await self.metadata()
        response = await self._post(
            meta["token_endpoint"], data, "its token endpoint", client_auth=True
        )
        body = self._json_body(response, "its token endpoint")
        if response.status_code != 200:
            raise Unauthorized(
                f"the identity provider refused the login: {self._oauth_error(body)}; start "
                "the login again",
                code="sso-refused",
            )
        return body

    # -- HTTP ---------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS, transport=self.transport)

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with self._client() as http:
                response = await http.get(url)
        except httpx.HTTPError as exc:
            raise BadGateway(
                f"the identity provider did not answer for {what} at {url}: {exc!r}"
            ) from None
        if response.status_code != 200:
            raise BadGateway(
                f"the identity provider answered {response.status_code} for {what} at {url}"
            )
        return self._json_body(response, what)

    async def _post(
        self, url: str, data: dict[str, str], what: str, *, client_auth: bool = False
    ) -> httpx.Response:
        auth = None
        if client_auth and self.settings.client_secret:
            auth = httpx.BasicAuth(self.settings.client_id, self.settings.client_secret)
        elif client_auth:
            data = {**data, "client_id": self.settings.client_id}
        try:
            async with self._client() as http:
                return await http.post(url, data=data, auth=auth)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise BadGateway(
                f"the identity provider did not answer at {what} ({url}): {exc!r}"
            ) from None

    @staticmethod
    def _json_body(response: httpx.Response, what: str) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise BadGateway(
                f"the identity provider answered {response.status_code} at {what} with "
                "something that is not a JSON object"
            )
        return body

    @staticmethod
    def _oauth_error(body: dict[str, Any]) -> str:
        error = body.get("error", "unknown error")
        description = body.get("error_description")
        return f"{error} ({description})" if description else str(error)


def provider_for(settings: OidcSettings | None, state: Any) -> Provider:
    """The Provider of these settings, cached on the app's ``state`` (one per server, so
    its lock and caches stay on the server's event loop); BadRequest when single sign-on
    is off."""
    if settings is None:
        raise BadRequest(
            "single sign-on is not configured on this server; log in with a password, or "
            "ask the admin to set auth.oidc (see docs/sso.md)",
            code="sso-off",
        )
    found = getattr(state, "oidc_provider", None)
    if not isinstance(found, Provider) or found.settings is not settings:
        found = Provider(settings)
        state.oidc_provider = found
    return found


async def oidc_actor(state: Any, db: Database, token: str) -> Actor:
    """The user behind an identity provider's access token (a bearer JWT): the token must
    pass every check, and its subject must be bound to an enabled user."""
    settings: OidcSettings | None = state.settings.auth.oidc
    if settings is None:
        raise Unauthorized(
            "this server has no single sign-on, so it takes no identity-provider tokens; "
            "log in with `evalkit login` and send the evalkit token",
            code="bad-token",
        )
    provider = provider_for(settings, state)
    claims = await provider.verify(token, audience=provider.audience, what="access token")
    async with db.connection() as conn:
        return await identities.actor_for_subject(conn, claims["sub"], provider.issuer)
