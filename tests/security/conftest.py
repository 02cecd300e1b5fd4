"""Fixtures of the security tests: one server per module on its own database (the walks
send hundreds of requests, and a server per request would cost half a second each)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import httpx
import psycopg

from evalkit.config import Settings
from tests.conftest import RunningServer, start_server, with_database

_counter = itertools.count()


@contextmanager
def module_server(
    pg_admin_url: str,
    tmp: Path,
    *,
    worker: bool = False,
    configure: Callable[[Settings], None] | None = None,
) -> Iterator[RunningServer]:
    """A real edge on a fresh database cloned from the migrated template; dropped after."""
    name = f"evalkit_security_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE evalkit_template")
    running = start_server(
        with_database(pg_admin_url, name), tmp, worker=worker, configure=configure
    )
    try:
        yield running
    finally:
        Api.close(running)
        running.stop()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class Api:
    """Plain HTTP calls to a server, as one bearer token or none, over one kept-alive
    connection pool per server (a new connection per call would double the walks' time)."""

    _clients: ClassVar[dict[str, httpx.Client]] = {}

    def __init__(self, server: RunningServer, token: str | None = None) -> None:
        self.server = server
        self.token = token

    def __call__(self, method: str, path: str, **kw: object) -> httpx.Response:
        headers = dict(kw.pop("headers", None) or {})  # type: ignore[call-overload]
        if self.token is not None:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        client = self._clients.get(self.server.url)
        if client is None:
            client = self._clients[self.server.url] = httpx.Client(timeout=30)
        try:
            return client.request(method, self.server.url + path, headers=headers, **kw)  # type: ignore[arg-type]
        except httpx.RemoteProtocolError:
            # A kept-alive connection the server closed as this request went out (it may
            # close one whose request body a refusal left unread): once more, on a new one.
            return client.request(method, self.server.url + path, headers=headers, **kw)  # type: ignore[arg-type]

    @classmethod
    def close(cls, server: RunningServer) -> None:
        client = cls._clients.pop(server.url, None)
        if client is not None:
            client.close()

    def ok(self, method: str, path: str, **kw: object) -> dict:
        response = self(method, path, **kw)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else {}


def login(server: RunningServer, username: str, password: str) -> str:
    response = httpx.post(
        f"{server.url}/api/auth/login", json={"username": username, "password": password}
    )
    assert response.status_code == 200, response.text
    return response.json()["token"]
