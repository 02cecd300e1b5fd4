"""HTTP/1.1 for an ASGI app on a socket that already listens, on the running event loop,
until the caller says stop: uvicorn with its C parser (httptools).

The edge and the reference harness serve through here. Measured against hypercorn (h11,
a parser in Python) for one 330 kB OTLP batch a request on uvloop: 0.15 to 0.18 ms of the
server's CPU a request, against 0.41 to 0.56 ms (benchmarks/README.md, "The HTTP server").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The caller owns SIGINT and SIGTERM (they set its stop event), and uvicorn's own
        # handlers would replace the event loop's, then raise a caught signal once more
        # when it stops.
        yield


async def serve_asgi(
    app: Any,
    sock: socket.socket,
    until: Callable[[], Awaitable[Any]],
    *,
    keep_alive_seconds: int,
    graceful_seconds: int,
) -> None:
    """Serve ``app`` on ``sock`` (taken over: closed when serving ends) until ``until()``
    returns; requests in flight then get up to ``graceful_seconds`` to finish.

    The app's lifespan runs (a failed start-up raises RuntimeError), and nothing about
    the client is taken from its headers: X-Forwarded-For and the like reach the app as
    headers, never as the client's address or scheme."""
    config = uvicorn.Config(
        app,
        http="httptools",
        ws="none",
        lifespan="on",
        interface="asgi3",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=keep_alive_seconds,
        timeout_graceful_shutdown=graceful_seconds,
    )
    server = _Server(config)
    serving = asyncio.ensure_future(_serve(server, sock))
    told = asyncio.ensure_future(until())
    try:
        await asyncio.wait({serving, told}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        await serving
    finally:
        told.cancel()
        if not serving.done():  # cancelled while it stops: end it at once
            server.force_exit = True
            serving.cancel()
        sock.close()


async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit:  # uvicorn's answer to a lifespan start-up that failed
        raise RuntimeError(
            "the HTTP app did not start: its lifespan start-up failed (the log has why)"
        ) from None
