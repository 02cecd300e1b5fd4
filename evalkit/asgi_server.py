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
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

TICK_SECONDS = 0.1
"""uvicorn's tick: every tenth one brings the Date header up to date."""

POLL_SECONDS = 0.01
"""How often a stopping server looks whether its connections have closed."""


class _Protocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol on a connection without Nagle's algorithm. uvicorn
    writes a response's head and its body apart: with Nagle, the body waits for the
    client's delayed ACK of the head, 40 ms a request (asyncio sets TCP_NODELAY only on
    sockets made with IPPROTO_TCP named, which accepted ones are not)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by an event. uvicorn looks for its stop every 0.1 s and
    pauses 0.1 s more before it waits for the connections to close. That is 0.18 s for
    every stop, and the test suite stops servers hundreds of times."""

    def __init__(self, config: uvicorn.Config, told: asyncio.Future[Any]) -> None:
        super().__init__(config)
        self.told = told

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The caller owns SIGINT and SIGTERM (they set its stop event), and uvicorn's own
        # handlers would replace the event loop's, then raise a caught signal once more
        # when it stops.
        yield

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864_000
            await asyncio.wait({self.told}, timeout=TICK_SECONDS)
            self.should_exit = self.told.done()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # an idle one closes now, a busy one after its response
        deadline = time.monotonic() + (self.config.timeout_graceful_shutdown or 0)
        while self.server_state.connections or self.server_state.tasks:
            if time.monotonic() >= deadline:
                for task in self.server_state.tasks:
                    task.cancel()
                break
            await asyncio.sleep(POLL_SECONDS)
        await self.lifespan.shutdown()


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
        http=_Protocol,
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
    told = asyncio.ensure_future(until())
    try:
        await _Server(config, told).serve(sockets=[sock])
    except SystemExit:  # uvicorn's answer to a lifespan start-up that failed
        raise RuntimeError(
            "the HTTP app did not start: its lifespan start-up failed (the log above says "
            "why); fix what it names and start the server again"
        ) from None
    finally:
        told.cancel()
        sock.close()
