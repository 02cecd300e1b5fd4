"""A harness (or the load balancer in front of it) that closes a kept-alive connection
without saying so: the next call on that pooled connection gets no answer at all. Every
Harness API call may be repeated (a start carries its idempotency key), so the client sends
it again once on a new connection instead of failing the step."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from evalkit.harness.client import HarnessClient, HarnessError

CAPABILITIES = json.dumps({"api_version": "1"}).encode()


def _answer(body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _read_request(conn: socket.socket) -> bool:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        data += chunk
    return True


@contextmanager
def one_answer_per_connection(answers: bool = True) -> Iterator[tuple[str, list[int]]]:
    """A server that answers the first request of each connection (when ``answers``), keeps
    it open (no ``Connection: close``), and closes it without a word when a second request
    comes. ``answered`` counts the requests it answered or, without answers, received."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    answered: list[int] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            if not answers:
                if _read_request(conn):
                    answered.append(1)
                return
            if _read_request(conn):
                conn.sendall(_answer(CAPABILITIES))
                answered.append(1)
            _read_request(conn)  # the reused connection's request: never answered

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", answered
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


async def test_a_call_on_a_connection_the_harness_dropped_is_sent_again():
    with one_answer_per_connection() as (url, answered):
        async with httpx.AsyncClient(timeout=5) as http:
            client = HarnessClient(url, None, http)
            for _ in range(3):
                caps = await client.capabilities()
                assert caps.api_version == "1"
                await asyncio.sleep(0.05)  # the connection goes back to the pool, kept alive
    assert len(answered) == 3, "each call after the first came in on a new connection"


async def test_a_harness_that_never_answers_is_tried_twice_then_a_retryable_error():
    with one_answer_per_connection(answers=False) as (url, received):
        async with httpx.AsyncClient(timeout=5) as http:
            with pytest.raises(HarnessError) as failed:
                await HarnessClient(url, None, http).capabilities()
    assert failed.value.retryable
    assert "Server disconnected without sending a response" in str(failed.value)
    assert len(received) == 2
