"""The SDK's calls to the evalkit server, with the developer's CLI login (or
``EVALKIT_SERVER_URL`` and ``EVALKIT_TOKEN``)."""

from __future__ import annotations

import os
from typing import Any

import msgspec

from evalkit.cli import credentials
from evalkit.cli.client import SERVER_URL_ENV, TOKEN_ENV, server_url
from evalkit.model import api
from evalkit.model.names import parse_ref
from evalkit.runs.local import ServerError, ServerLink
from evalkit.sdk._model import SdkError

__all__ = ["SdkLink", "ServerError", "login"]


def load_project_or_none() -> Any:
    """The evalkit.yaml nearest the working directory (a ProjectConfig), or None when there
    is none; one with errors is refused, naming them."""
    from evalkit.cases import ProjectError, ProjectNotFound, load_project

    try:
        return load_project()
    except ProjectNotFound:
        return None
    except ProjectError as exc:
        raise SdkError(f"evalkit.yaml has errors: {exc}") from None


def project_server_url() -> str | None:
    """``server_url`` of the evalkit.yaml nearest the working directory, as ``evalkit lint``
    and ``evalkit sync`` read it; None when EVALKIT_SERVER_URL is set (it overrides the
    file), when there is no evalkit.yaml, or when it names no server."""
    if os.environ.get(SERVER_URL_ENV):
        return None
    project = load_project_or_none()
    return project.server_url if project is not None else None


def login(explicit_url: str | None = None) -> tuple[str, str]:
    """(server URL, token) as the CLI finds them: ``explicit_url``, else
    ``EVALKIT_SERVER_URL``, else evalkit.yaml's ``server_url``, else the server of the last
    ``evalkit login``; ``EVALKIT_TOKEN`` or that login's stored token."""
    base = server_url(explicit_url or project_server_url())
    token = os.environ.get(TOKEN_ENV)
    if not token:
        stored = credentials.load().servers.get(base)
        token = stored.token if stored else None
    if not token:
        raise SdkError(
            f"not logged in to {base}: run `evalkit login {base}` once on this machine, or set "
            f"{TOKEN_ENV} (and {SERVER_URL_ENV} for another server)"
        )
    return base, token


class SdkLink(ServerLink):
    """Async JSON calls; refusals raise ServerError with the server's message and rule."""

    def __init__(self, base_url: str, token: str) -> None:
        super().__init__(base_url, token)
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.http.headers["User-Agent"] = "evalkit-sdk"
        self._me: api.WhoAmI | None = None

    async def get(self, path: str, type: Any = Any) -> Any:
        response = await self._send("GET", path)
        return msgspec.json.decode(response.content, type=type)

    async def post_json(self, path: str, body: Any = None, type: Any = Any) -> Any:
        content = msgspec.json.encode(body if body is not None else {})
        response = await self._send("POST", path, content=content)
        return msgspec.json.decode(response.content, type=type)

    async def me(self) -> api.WhoAmI:
        if self._me is None:
            self._me = await self.get("/api/auth/whoami", api.WhoAmI)
        return self._me

    async def ref(self, text: str, what: str, workspace: str | None = None) -> tuple[str, str]:
        """(name, workspace) of ``NAME@WS``; a bare name is in ``workspace`` if given, else
        the caller's personal workspace."""
        try:
            ref = parse_ref(text, what)
        except Exception as exc:
            raise SdkError(str(exc)) from None
        if ref.workspace:
            if workspace and workspace != ref.workspace:
                raise SdkError(
                    f"{what} {text!r} names workspace {ref.workspace!r} but workspace="
                    f"{workspace!r} was given; name it once"
                )
            return ref.name, ref.workspace
        return ref.name, workspace or (await self.me()).personal_workspace
