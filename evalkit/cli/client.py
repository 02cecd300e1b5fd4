"""The CLI's HTTP client: finds the server and the token, turns refusals into CliError."""

from __future__ import annotations

import os
from typing import Any

import httpx
import msgspec

from evalkit import __version__
from evalkit.cli import credentials, login_sso
from evalkit.cli.output import CliError, note
from evalkit.distribution import VERSION_HEADER, is_newer
from evalkit.errors import BadRequest
from evalkit.model import api
from evalkit.model.names import Ref, parse_ref

SERVER_URL_ENV = "EVALKIT_SERVER_URL"
TOKEN_ENV = "EVALKIT_TOKEN"
DEFAULT_SERVER = "http://127.0.0.1:8600"


def server_url(explicit: str | None = None) -> str:
    url = (
        explicit
        or os.environ.get(SERVER_URL_ENV)
        or credentials.load().default_server
        or DEFAULT_SERVER
    )
    return url.rstrip("/")


_nudged = False


def nudge_if_outdated(response: httpx.Response) -> None:
    """One line on stderr, once per command, when the server runs a later evalkit."""
    global _nudged
    server_version = response.headers.get(VERSION_HEADER)
    if _nudged or not server_version or not is_newer(server_version, __version__):
        return
    _nudged = True
    note(
        f"evalkit {server_version} is on the server and this CLI is {__version__}: "
        "run `evalkit update`"
    )


def _tls(base_url: str) -> dict[str, Any]:
    """For an http:// server, a TLS context that trusts no one instead of httpx's default,
    which loads the whole CA bundle (30 to 100 ms of every command) for a connection that
    never uses it. The client only talks to ``base_url``; were it ever to speak TLS with
    this context, verification would fail, not pass."""
    if not base_url.startswith("http://"):
        return {}
    import ssl

    return {"verify": ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)}


class Client:
    def __init__(self, base_url: str | None = None, token: str | None = None) -> None:
        self.base_url = server_url(base_url)
        self.token = token if token is not None else self._stored_token()
        headers = {"User-Agent": "evalkit-cli"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=60.0, **_tls(self.base_url)
        )

    def _stored_token(self) -> str | None:
        env = os.environ.get(TOKEN_ENV)
        if env:
            return env
        if login_sso.machine_credentials() is not None:  # CI: a machine client's token
            return login_sso.client_credentials_token(self.base_url)
        stored = credentials.load().servers.get(self.base_url)
        return stored.token if stored else None

    def request(self, method: str, path: str, *, json: Any = None, type: Any = None) -> Any:
        body = msgspec.json.encode(json) if json is not None else None
        try:
            response = self.http.request(
                method, path, content=body, headers={"Content-Type": "application/json"}
            )
        except httpx.ConnectError:
            raise CliError(
                f"cannot reach the evalkit server at {self.base_url}; is it running? "
                f"(set {SERVER_URL_ENV} or run `evalkit login URL`)"
            ) from None
        except httpx.TimeoutException:
            raise CliError(
                f"the evalkit server at {self.base_url} did not answer in time"
            ) from None
        nudge_if_outdated(response)
        if response.status_code >= 400:
            raise CliError(self.explain(response))
        if response.status_code == 204 or type is None:
            return None
        return msgspec.json.decode(response.content, type=type)

    def get(self, path: str, type: Any) -> Any:
        return self.request("GET", path, type=type)

    def post(self, path: str, json: Any = None, type: Any = None) -> Any:
        return self.request("POST", path, json=json if json is not None else {}, type=type)

    def explain(self, response: httpx.Response) -> str:
        """One line from an error answer: the server's message and the rule's code."""
        try:
            error = response.json()["error"]
            code, message = error["code"], error["message"]
        except (ValueError, KeyError, TypeError):
            return f"the server answered {response.status_code}: {response.text[:200]}"
        if code == "login-required":
            return f"not logged in to {self.base_url}: run `evalkit login`"
        return f"{message} [{code}]"

    def personal_workspace(self) -> str:
        me: api.WhoAmI = self.get("/api/auth/whoami", type=api.WhoAmI)
        return me.personal_workspace

    def resolve(self, text: str, what: str) -> Ref:
        """``NAME@WORKSPACE``, or a bare ``NAME`` in the caller's personal workspace."""
        try:
            ref = parse_ref(text, what)
        except BadRequest as exc:
            raise CliError(exc.message, exit_code=2) from None
        return ref if ref.workspace else ref.resolve(self.personal_workspace())

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
