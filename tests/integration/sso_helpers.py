"""An identity provider on loopback for the single sign-on tests: the ``oidc-provider-mock``
package (authorization code, ID tokens, JWKS, discovery), plus what that version lacks and
real providers have, added on its own Flask app: the client-credentials grant issuing RS256
JWT access tokens (RFC 9068) signed with the provider's published key, and the device flow
(RFC 8628) with a page where the "user" enters the code."""

from __future__ import annotations

import secrets
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import flask
import pytest
import werkzeug.serving
from joserfc import jwt
from joserfc.jwk import RSAKey

with warnings.catch_warnings():  # the mock imports authlib.jose, deprecated upstream
    import authlib.deprecate  # noqa: F401  (its import turns its warnings on: undo that here)

    warnings.simplefilter("ignore")
    import oidc_provider_mock
    from oidc_provider_mock import User

# The mock's token endpoint calls an authlib hook that authlib deprecates; under pytest's
# warnings-as-errors that would be a 500 from the provider. Test modules using it apply this.
IDP_WARNINGS = pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning")

CLIENT_ID = "evalkit"
CLIENT_SECRET = "evalkit-client-secret"


class _Quiet(werkzeug.serving.WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        return


@dataclass
class IdP:
    url: str
    app: flask.Flask
    machines: dict[str, str] = field(default_factory=dict)
    """Machine clients: client id -> secret; a client's id is its token's subject."""
    audience: str = CLIENT_ID
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)

    def signing_key(self) -> RSAKey:
        with self.app.test_request_context("/"):
            self.app.preprocess_request()
            raw = flask.g.oidc_provider_mock_storage.jwk.as_dict(is_private=True)
        return RSAKey.import_key(raw)

    def sign(self, claims: dict[str, Any], key: RSAKey | None = None) -> str:
        key = key or self.signing_key()
        header = {"alg": "RS256", "typ": "at+jwt", "kid": key.thumbprint()}
        return jwt.encode(header, claims, key)

    def access_token(self, sub: str, *, ttl: int = 300, **extra: Any) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": sub,
            "aud": self.audience,
            "iat": now,
            "exp": now + ttl,
            "client_id": sub,
            **extra,
        }
        return self.sign(claims)

    def set_user(self, sub: str, **claims: Any) -> None:
        """Claims the provider sends for a subject (the mock shows them in its ID tokens)."""
        with self.app.test_request_context("/"):
            self.app.preprocess_request()
            flask.g.oidc_provider_mock_storage.store_user(User(sub=sub, claims=claims))


def _extend(idp: IdP, *, device_flow: bool) -> None:
    app = idp.app

    @app.before_request
    def extra_grants() -> Any:
        request = flask.request
        if request.path == "/oauth2/token" and request.method == "POST":
            grant = request.form.get("grant_type")
            if grant == "client_credentials":
                auth = request.authorization
                if not auth or idp.machines.get(auth.username or "") != auth.password:
                    return flask.jsonify(error="invalid_client"), 401
                token = idp.access_token(auth.username or "", ttl=600)
                return flask.jsonify(access_token=token, token_type="Bearer", expires_in=600)
            if grant == "urn:ietf:params:oauth:grant-type:device_code":
                return _device_token(idp, request.form.get("device_code", ""))
        if device_flow and request.path == "/oauth2/device" and request.method == "POST":
            device_code, user_code = secrets.token_urlsafe(16), secrets.token_hex(3).upper()
            idp.devices[device_code] = {
                "user_code": user_code,
                "client_id": request.form.get("client_id")
                or (request.authorization.username if request.authorization else None),
                "sub": None,
            }
            return flask.jsonify(
                device_code=device_code,
                user_code=user_code,
                verification_uri=f"{idp.url}/device",
                expires_in=300,
                interval=1,
            )
        if device_flow and request.path == "/device" and request.method == "POST":
            for entry in idp.devices.values():
                if entry["user_code"] == request.form.get("user_code"):
                    entry["sub"] = request.form["sub"]
                    return "signed in; go back to your terminal"
            return "no such code", 400
        return None

    @app.after_request
    def announce_device_flow(response: flask.Response) -> flask.Response:
        if device_flow and flask.request.path == "/.well-known/openid-configuration":
            body = response.get_json()
            body["device_authorization_endpoint"] = f"{idp.url}/oauth2/device"
            body["grant_types_supported"] = [
                *body["grant_types_supported"],
                "client_credentials",
                "urn:ietf:params:oauth:grant-type:device_code",
            ]
            response.set_data(flask.json.dumps(body))
        return response


def _device_token(idp: IdP, device_code: str) -> Any:
    entry = idp.devices.get(device_code)
    if entry is None:
        return flask.jsonify(error="expired_token"), 400
    if entry["sub"] is None:
        return flask.jsonify(error="authorization_pending"), 400
    del idp.devices[device_code]
    user = flask.g.oidc_provider_mock_storage.get_user(entry["sub"])
    now = int(time.time())
    claims = {
        **(user.claims if user else {}),
        "iss": idp.url,
        "sub": entry["sub"],
        "aud": entry["client_id"],
        "iat": now,
        "exp": now + 300,
    }
    return flask.jsonify(id_token=idp.sign(claims), token_type="Bearer", expires_in=300)


@contextmanager
def running_idp(
    *, device_flow: bool = False, users: dict[str, dict[str, Any]] | None = None
) -> Iterator[IdP]:
    """An identity provider on 127.0.0.1 (a free port), stopped at the end."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        app = oidc_provider_mock.app(
            user_claims=[User(sub=s, claims=c) for s, c in (users or {}).items()],
            require_nonce=True,
        )
    server = werkzeug.serving.make_server(
        "127.0.0.1", 0, app, threaded=True, request_handler=_Quiet
    )
    idp = IdP(url=f"http://127.0.0.1:{server.server_port}", app=app)
    _extend(idp, device_flow=device_flow)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield idp
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


def oidc_settings(idp: IdP, **overrides: Any) -> Any:
    from evalkit.config import OidcSettings

    values: dict[str, Any] = {
        "issuer": idp.url,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
    }
    values.update(overrides)
    return OidcSettings(**values)
