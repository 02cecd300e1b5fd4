"""evalkit.asgi_server: what it sets on uvicorn on purpose, on a real socket on loopback."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from evalkit.asgi_server import serve_asgi


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


async def lifespan(receive: Any, send: Any) -> None:
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def who_am_i(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the client address and scheme the server put in the scope."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    body = f"{scope['client'][0]} {scope['scheme']}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[tuple[str, asyncio.Event, asyncio.Task[None]]]:
    sock = listening()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_asgi(app, sock, stop.wait, keep_alive_seconds=5, graceful_seconds=2)
    )
    try:
        yield url, stop, task
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_forwarded_headers_do_not_change_the_client_or_the_scheme() -> None:
    async with served(who_am_i) as (url, _, _), httpx.AsyncClient() as client:
        response = await client.get(
            url + "/",
            headers={"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"},
        )
    assert response.text == "127.0.0.1 http"
    assert "server" not in response.headers  # no banner naming the server


def held(seconds: float) -> tuple[Any, asyncio.Event]:
    """An app that takes ``seconds`` over each request, and the event it sets when a request
    has come in (so a test stops the server with the request in flight, not before)."""
    arrived = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        arrived.set()
        await asyncio.sleep(seconds)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    return app, arrived


async def test_a_request_in_flight_finishes_when_the_server_is_told_to_stop() -> None:
    app, arrived = held(0.5)
    async with served(app) as (url, stop, task), httpx.AsyncClient() as client:
        request = asyncio.create_task(client.get(url + "/"))
        await asyncio.wait_for(arrived.wait(), 10)
        stop.set()
        response = await request
        await asyncio.wait_for(task, 10)
    assert response.status_code == 200 and response.text == "done"


async def test_serving_leaves_the_signal_handlers_alone() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    async with served(who_am_i) as (url, _, _), httpx.AsyncClient() as client:
        assert (await client.get(url + "/")).status_code == 200
        during = {sig: signal.getsignal(sig) for sig in before}
    assert during == before


async def test_a_failed_lifespan_start_raises_instead_of_exiting() -> None:
    async def broken(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no database"})

    sock = listening()
    with pytest.raises(RuntimeError, match="lifespan start-up failed"):
        await serve_asgi(
            broken, sock, asyncio.Event().wait, keep_alive_seconds=5, graceful_seconds=1
        )
    assert sock.fileno() == -1  # closed: taken over either way


async def test_a_request_past_the_graceful_limit_is_cut_off_and_answered_500() -> None:
    forever, arrived = held(60)
    sock = listening()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_asgi(forever, sock, stop.wait, keep_alive_seconds=5, graceful_seconds=1)
    )
    async with httpx.AsyncClient(timeout=30) as client:
        request = asyncio.create_task(client.get(url))
        await asyncio.wait_for(arrived.wait(), 10)
        stop.set()
        await asyncio.wait_for(task, 10)  # not the 60 s the app would take
        response = await request
    assert response.status_code == 500


async def test_a_response_does_not_wait_for_the_clients_delayed_ack() -> None:
    # Without TCP_NODELAY on the connection, each response's body waits for the client's
    # delayed ACK of its head: 40 ms or more a request on Linux, 1.6 s for these 40. They
    # take a few ms each when nothing waits.
    async with served(who_am_i) as (url, _, _), httpx.AsyncClient() as client:
        await client.get(url + "/")  # the connection, kept alive for the rest
        began = time.monotonic()
        for _ in range(40):
            assert (await client.get(url + "/")).status_code == 200
        elapsed = time.monotonic() - began
    assert elapsed < 1.0, f"40 requests took {elapsed:.2f} s"
