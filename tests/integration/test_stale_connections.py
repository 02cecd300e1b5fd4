"""A peer (or the load balancer in front of it) that closes a kept-alive connection without
saying so: the next call on that pooled connection gets no answer at all. Every Harness API
call may be repeated (a start carries its idempotency key), and so may a judge's completion
and a remote evaluator's scoring request, so each client sends the call again once on a new
connection instead of failing the step or the score: the harness client through
:class:`evalkit.http1.Http1Client`, the judge and the remote evaluators through httpx."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from evalkit.cases.model import JudgeConfig
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.http1 import Http1Client
from evalkit.outbound import make_client
from evalkit.scoring.judge import JudgeSetup, grade
from evalkit.scoring.remote import RemoteEvaluator, evaluate
from tests.integration.test_http1 import Request, Server
from tests.integration.test_judge import context as judge_context
from tests.integration.test_remote_evaluators import context as evaluator_context

CAPABILITIES = json.dumps({"api_version": "1"}).encode()


def _answer(body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _read_request(conn: socket.socket) -> bool:
    """Read one whole request, body included: closing a socket with unread bytes in it
    sends a reset instead of the quiet close this server stands for."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return False
        body += chunk
    return True


@contextmanager
def one_answer_per_connection(
    answers: bool = True, body: bytes = CAPABILITIES
) -> Iterator[tuple[str, list[int]]]:
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
                conn.sendall(_answer(body))
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
        async with Http1Client(None, timeout=5) as http:
            client = HarnessClient(url, None, http)
            for _ in range(3):
                caps = await client.capabilities()
                assert caps.api_version == "1"
                await asyncio.sleep(0.05)  # the connection goes back to the pool, kept alive
    assert len(answered) == 3, "each call after the first came in on a new connection"


async def test_a_harness_that_stops_answering_is_tried_twice_then_a_retryable_error():
    """The call after an answered one goes out on the kept-alive connection, which the
    harness drops, then once more on a new connection, which it drops too."""

    def first_only(request: Request) -> bytes | None:
        return _answer(CAPABILITIES) if (request.connection, request.index) == (1, 0) else None

    async with Server(first_only) as server, Http1Client(None, timeout=5) as http:
        client = HarnessClient(server.url, None, http)
        assert (await client.capabilities()).api_version == "1"
        with pytest.raises(HarnessError) as failed:
            await client.capabilities()
    assert failed.value.retryable
    assert str(failed.value) == (
        f"GET {server.url}/capabilities: the server closed the connection without answering"
    )
    assert [(r.connection, r.index) for r in server.requests] == [(1, 0), (1, 1), (2, 0)]


async def test_a_harness_that_never_answers_is_tried_once_then_a_retryable_error():
    """A new connection closed without an answer is no stale pooled one: not sent again."""
    with one_answer_per_connection(answers=False) as (url, received):
        async with Http1Client(None, timeout=5) as http:
            with pytest.raises(HarnessError) as failed:
                await HarnessClient(url, None, http).capabilities()
    assert failed.value.retryable
    assert str(failed.value) == (
        f"GET {url}/capabilities: the server closed the connection without answering"
    )
    assert len(received) == 1


def _completion(verdict: dict) -> bytes:
    message = {"role": "assistant", "content": json.dumps(verdict)}
    return json.dumps(
        {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    ).encode()


async def test_a_judge_call_on_a_dropped_connection_is_sent_again_not_counted_as_a_failure():
    reply = _completion({"reasoning": "It says Paris.", "score": 1})
    with one_answer_per_connection(body=reply) as (url, answered):
        judge = JudgeSetup(provider="test", base_url=url, model="judge-1", attempts=1)
        config = JudgeConfig(rubric="The answer names Paris.")
        async with make_client(None) as http:
            for _ in range(3):
                [item] = await grade(judge_context(), config, judge=judge, http=http)
                assert item.error is None and item.value == 1.0, item
                await asyncio.sleep(0.05)
    assert len(answered) == 3


async def test_an_evaluator_call_on_a_dropped_connection_is_sent_again():
    reply = json.dumps({"scores": [{"name": "echo", "score": 1}]}).encode()
    with one_answer_per_connection(body=reply) as (url, answered):
        evaluator = RemoteEvaluator(name="echo", workspace="dev", endpoint=url + "/echo")
        async with make_client(None) as http:
            for _ in range(3):
                [item] = await evaluate(
                    evaluator_context(), "echo", {}, evaluator=evaluator, http=http
                )
                assert item.error is None and item.value == 1.0, item
                await asyncio.sleep(0.05)
    assert len(answered) == 3
