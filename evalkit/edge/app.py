"""The Starlette application: routes as data, pure ASGI middleware, the pool in lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evalkit import __version__, web
from evalkit.auth import passwords
from evalkit.config import Settings
from evalkit.db import Database
from evalkit.distribution import VERSION_HEADER
from evalkit.edge.endpoint import error_response
from evalkit.edge.routes import ENDPOINTS

log = logging.getLogger("evalkit.edge")

VERSION = (VERSION_HEADER.encode(), __version__.encode())
"""On every answer: a CLI compares it with its own version and nudges its user to
`evalkit update`."""

SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class StandardHeaders:
    """Adds the server's version and conservative security headers to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in (VERSION, *SECURITY_HEADERS) if k not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _unhandled(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal", "the server failed on this request; see its log")


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "no-such-route", f"no route {request.method} {request.url.path}")


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(405, "method-not-allowed", f"{request.method} is not allowed here")


def create_app(settings: Settings, db: Database, *, manage_pool: bool = True) -> Starlette:
    """``manage_pool=False`` when the caller opens and closes ``db`` itself."""
    passwords.stand_in_hash()  # now, not in the first login of an unknown user

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_pool:
            await db.open()
        try:
            yield
        finally:
            if manage_pool:
                await db.close()

    app = Starlette(
        routes=[*(endpoint.route() for endpoint in ENDPOINTS), *web.routes()],
        middleware=[Middleware(StandardHeaders)],
        exception_handlers={404: _not_found, 405: _method_not_allowed, Exception: _unhandled},
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.db = db
    app.state.endpoints = ENDPOINTS  # what GET /api/openapi.json describes
    app.state.blobs = None  # opened on first use: a gs:// client is not free to create
    return app
