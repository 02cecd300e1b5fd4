"""Http1Client (evalkit/http1.py), the Harness API's HTTP/1.1 client, against servers these
tests write byte by byte on 127.0.0.1: framing, strictness, keep-alive, sending once more on
a dropped connection, timeouts, the egress policy and TLS; then HarnessClient on top of it."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evalkit import outbound
from evalkit.config import EgressSettings
from evalkit.harness import client as harness_client
from evalkit.harness.client import HarnessClient, HarnessError
from evalkit.harness.reference import ReferenceHarness
from evalkit.http1 import (
    Http1BodyTooLarge,
    Http1Client,
    Http1ConnectError,
    Http1Disconnected,
    Http1ProtocolError,
    Http1Timeout,
)
from evalkit.model.harness import RunMetadata, RunStart
from evalkit.outbound import EgressRefused

MAX = 2**20
PRIVATE_OK = EgressSettings(allow_private=True)
STRICT = EgressSettings()
MARGIN = 3.0
"""Seconds a test waits past a client's timeout before it calls the timeout broken."""


# --------------------------------------------------------------------------- a server


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int
    """Which connection it came on (1: the first the server accepted)."""
    index: int
    """Its place on that connection (0: the connection's first request)."""


class Closing(bytes):
    """An answer after which the server closes the connection."""


HANG = object()
"""An answer that is never sent: the connection stays open and silent."""

Reply = bytes | object | None
"""Bytes to send (and keep the connection), a :class:`Closing`, :data:`HANG`, or None:
close the connection without a word."""


def ok(body: bytes = b"hello", *headers: str) -> bytes:
    head = [f"Content-Length: {len(body)}", "Content-Type: text/plain", *headers]
    return answer("200 OK", head, body)


def answer(status: str, headers: list[str], body: bytes = b"") -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode() + body


@dataclass
class Server:
    """An HTTP/1.1 server on 127.0.0.1 that answers each request with ``reply(request)``
    (which may be a coroutine) and counts the connections it accepted."""

    reply: Callable[[Request], Reply | Awaitable[Reply]]
    tls: ssl.SSLContext | None = None
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a connection ends (the client closed it, or the server did)."""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        connection = self.connections
        try:
            for index in itertools.count():
                request = await _read_request(reader, connection, index)
                if request is None:
                    return
                self.requests.append(request)
                reply = self.reply(request)
                if inspect.isawaitable(reply):
                    reply = await reply
                if reply is None:
                    return
                if reply is HANG:
                    await asyncio.Event().wait()
                assert isinstance(reply, bytes)
                writer.write(reply)
                await writer.drain()
                if isinstance(reply, Closing):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return  # a client gone, or the test over (cancelled): nothing to tell anyone
        finally:
            writer.close()
            self.closed.set()


async def _read_request(
    reader: asyncio.StreamReader, connection: int, index: int
) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    method, target, _version = request_line.split(" ")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, target, headers, body, connection, index)


def always(reply: Reply) -> Callable[[Request], Reply]:
    return lambda _request: reply


async def within(awaitable: Awaitable[Any], seconds: float) -> Any:
    """``awaitable``'s result; a builtin TimeoutError (no test expects one) if it takes
    longer than ``seconds``."""
    return await asyncio.wait_for(awaitable, seconds)


# --------------------------------------------------------------------------- framing


@pytest.mark.parametrize("size", [5, 3 * MAX + 7])
async def test_a_content_length_body_and_the_request_as_sent(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    server = Server(always(ok(body, "X-Twice: 1", "X-Twice: 2")))
    async with server, Http1Client(PRIVATE_OK) as client:
        response = await client.request(
            "POST",
            f"{server.url}/runs/a%2Fb?cursor=x%3Dy",
            headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
            body=b'{"a": 1}',
            max_body=4 * MAX,
        )
    assert (response.status, response.body) == (200, body)
    assert response.headers["content-type"] == "text/plain"
    assert response.headers["x-twice"] == "1, 2"
    (sent,) = server.requests
    assert (sent.method, sent.target, sent.body) == (
        "POST",
        "/runs/a%2Fb?cursor=x%3Dy",
        b'{"a": 1}',
    )
    assert sent.headers["host"] == f"127.0.0.1:{server.port}"
    assert sent.headers["user-agent"] == outbound.USER_AGENT
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["authorization"] == "Bearer k"
    assert sent.headers["content-length"] == "8"


async def test_a_get_has_no_length_and_a_post_without_a_body_has_length_zero() -> None:
    async with Server(always(ok())) as server, Http1Client(None) as client:
        await client.request("GET", server.url + "/capabilities", max_body=MAX)
        await client.request("POST", server.url + "/runs/r1/stop", max_body=MAX)
    get, post = server.requests
    assert "content-length" not in get.headers and post.headers["content-length"] == "0"
    assert get.target == "/capabilities"


async def test_a_chunked_body_with_extensions_and_trailers_then_the_connection_is_reused():
    chunked = answer(
        "200 OK",
        ["Transfer-Encoding: chunked"],
        b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: abc\r\nX-More: 1\r\n\r\n",
    )
    async with Server(always(chunked)) as server, Http1Client(None) as client:
        for _ in range(2):
            response = await client.request("GET", server.url + "/t", max_body=MAX)
            assert (response.status, response.body) == (200, b"hello world")
    assert server.connections == 1, "the trailers were not read to their end"


async def test_a_large_chunk_arrives_whole():
    data = bytes(range(256)) * (3 * MAX // 256)
    chunked = answer(
        "200 OK",
        ["Transfer-Encoding: chunked"],
        f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n",
    )
    async with Server(always(chunked)) as server, Http1Client(None) as client:
        response = await client.request("GET", server.url + "/t", max_body=4 * MAX)
    assert response.body == data


async def test_a_close_delimited_body_is_read_to_the_close_and_the_connection_not_reused():
    body = b"x" * 100_000
    server = Server(always(Closing(answer("200 OK", [], body))))
    async with server, Http1Client(None) as client:
        for _ in range(2):
            response = await client.request("GET", server.url + "/t", max_body=MAX)
            assert response.body == body
    assert server.connections == 2


@pytest.mark.parametrize(
    "reply",
    [
        ok(b"bye", "Connection: close"),
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nbye",  # 1.0 without keep-alive
    ],
    ids=["connection-close", "http-1.0"],
)
async def test_a_connection_the_answer_closes_is_not_reused(reply: bytes) -> None:
    async with Server(always(reply)) as server, Http1Client(None) as client:
        for _ in range(2):
            assert (await client.request("GET", server.url + "/t", max_body=MAX)).body == b"bye"
    assert server.connections == 2


async def test_informational_answers_before_the_status_are_skipped():
    early = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
    async with Server(always(early + ok(b"final"))) as server, Http1Client(None) as client:
        for _ in range(2):
            response = await client.request("GET", server.url + "/t", max_body=MAX)
            assert (response.status, response.body) == (200, b"final")
            assert "link" not in response.headers
    assert server.connections == 1


async def test_head_204_and_304_have_no_body_even_with_a_length():
    """A client that read a body here would wait for bytes that never come (and time out),
    or take the next answer for this one's body."""

    def reply(request: Request) -> bytes:
        if request.method == "HEAD":
            return answer("200 OK", ["Content-Length: 5"])
        if request.target == "/gone":
            return answer("204 No Content", [])
        return answer("304 Not Modified", ["Content-Length: 5"])

    async with Server(reply) as server, Http1Client(None, timeout=MARGIN) as client:
        for method, path, status in [("HEAD", "/", 200), ("GET", "/gone", 204), ("GET", "/", 304)]:
            response = await client.request(method, server.url + path, max_body=MAX)
            assert (response.status, response.body) == (status, b"")
    assert server.connections == 1


async def test_a_redirect_is_returned_not_followed():
    def reply(request: Request) -> bytes:
        return answer("302 Found", ["Location: /elsewhere", "Content-Length: 0"])

    async with Server(reply) as server, Http1Client(PRIVATE_OK) as client:
        response = await client.request("GET", server.url + "/start", max_body=MAX)
    assert response.status == 302 and response.headers["location"] == "/elsewhere"
    assert [r.target for r in server.requests] == ["/start"]


# --------------------------------------------------------------------------- strictness


MALFORMED = {
    "status-two-digits": b"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
    "status-not-http": b"ICY 200 OK\r\nContent-Length: 0\r\n\r\n",
    "status-http-2": b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
    "header-space-in-name": b"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n",
    "header-no-colon": b"HTTP/1.1 200 OK\r\nNoColon\r\nContent-Length: 0\r\n\r\n",
    "header-folded": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 0\r\n\r\n",
    "header-bare-lf": b"HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\nContent-Length: 0\r\n\r\n",
    "length-two-values": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nab",
    "length-negative": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    "chunk-size-not-hex": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"zz\r\nab\r\n0\r\n\r\n",
    "chunk-size-missing": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
    "chunk-longer-than-said": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2\r\nabc\r\n0\r\n\r\n",
    "trailer-malformed": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\nnot a trailer\r\n\r\n",
    "coding-not-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nab",
    "switching-protocols": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
    "header-block-over-64k": b"HTTP/1.1 200 OK\r\nX-Big: "
    + b"a" * (64 * 1024)
    + b"\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("bad", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_answer_is_a_protocol_error_and_its_connection_is_dropped(bad: bytes):
    """The server keeps the bad connection open and would answer on it again: only the
    client dropping it makes the next request come on a second connection."""

    def reply(request: Request) -> bytes:
        return bad if request.connection == 1 else ok()

    async with Server(reply) as server, Http1Client(None, timeout=MARGIN) as client:
        with pytest.raises(Http1ProtocolError) as caught:
            await client.request("GET", server.url + "/t", max_body=MAX)
        assert caught.value.url == server.url + "/t"
        assert str(caught.value).startswith(f"GET {server.url}/t: ")
        response = await client.request("GET", server.url + "/t", max_body=MAX)
    assert response.status == 200 and server.connections == 2


async def test_a_header_block_just_under_64k_is_read():
    big = answer("200 OK", ["X-Big: " + "a" * (63 * 1024), "Content-Length: 2"], b"ok")
    async with Server(always(big)) as server, Http1Client(None) as client:
        response = await client.request("GET", server.url + "/t", max_body=MAX)
    assert response.body == b"ok" and len(response.headers["x-big"]) == 63 * 1024


BODIES_OVER_1000 = {
    # Each server sends what is shown, then nothing more, and keeps the connection open: a
    # client that read on for the rest would wait out its timeout.
    "content-length": answer("200 OK", ["Content-Length: 10000000"]),
    "chunked": answer("200 OK", ["Transfer-Encoding: chunked"], b"258\r\n" + b"a" * 600 + b"\r\n")
    + b"258\r\n"
    + b"b" * 600
    + b"\r\n",
    "close-delimited": answer("200 OK", [], b"c" * 2000),
}


@pytest.mark.parametrize("reply", BODIES_OVER_1000.values(), ids=BODIES_OVER_1000.keys())
async def test_a_body_over_max_body_is_refused_without_reading_the_rest(reply: bytes):
    async with Server(always(reply)) as server, Http1Client(None, timeout=30) as client:
        with pytest.raises(Http1BodyTooLarge, match="larger than the 1000 bytes allowed"):
            await within(client.request("GET", server.url + "/t", max_body=1000), MARGIN)


async def test_a_body_of_exactly_max_body_is_read():
    async with Server(always(ok(b"z" * 1000))) as server, Http1Client(None) as client:
        assert len((await client.request("GET", server.url, max_body=1000)).body) == 1000


# --------------------------------------------------------------------------- failures


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_refused_connection_is_a_connect_error():
    port = unused_port()
    async with Http1Client(None) as client:
        with pytest.raises(Http1ConnectError, match=f"cannot connect to 127.0.0.1:{port}"):
            await client.request("GET", f"http://127.0.0.1:{port}/x", max_body=MAX)


async def test_a_server_that_never_answers_times_out_on_time():
    async with Server(always(HANG)) as server, Http1Client(None, timeout=0.3) as client:
        with pytest.raises(Http1Timeout, match=r"no whole answer within 0\.3 s"):
            await within(client.request("GET", server.url + "/t", max_body=MAX), 0.3 + MARGIN)
    assert len(server.requests) == 1, "it timed out waiting for the answer, not to connect"


async def test_a_connection_that_never_opens_times_out_on_connect_timeout(monkeypatch):
    async def never(*args: object, **kwargs: object) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(asyncio, "open_connection", never)
    async with Http1Client(None, timeout=60, connect_timeout=0.2) as client:
        with pytest.raises(Http1Timeout, match=r"no connection within 0\.2 s"):
            await within(client.request("GET", "http://127.0.0.1:9/x", max_body=MAX), MARGIN)


# --------------------------------------------------------------------------- keep-alive


async def test_sequential_requests_share_one_connection():
    async with Server(always(ok())) as server, Http1Client(None) as client:
        for _ in range(10):
            await client.request("GET", server.url + "/t", max_body=MAX)
    assert server.connections == 1 and len(server.requests) == 10


async def test_32_in_flight_keep_their_32_connections_for_the_next_32():
    """The server holds every answer until 32 requests are in, so the first round opens 32
    connections; the second round must find all 32 kept (a pool that keeps 20 would open
    12 more)."""
    all_in = asyncio.Event()

    async def reply(request: Request) -> bytes:
        if len(server.requests) >= 32:
            all_in.set()
        await all_in.wait()
        return ok()

    server = Server(reply)
    async with server, Http1Client(None) as client:
        for _ in range(2):
            await asyncio.gather(
                *(client.request("GET", server.url + "/t", max_body=MAX) for _ in range(32))
            )
    assert len(server.requests) == 64 and server.connections == 32


async def test_max_connections_bounds_the_connections_opened():
    async with Server(always(ok())) as server, Http1Client(None, max_connections=4) as client:
        await asyncio.gather(
            *(client.request("GET", server.url + "/t", max_body=MAX) for _ in range(20))
        )
    assert len(server.requests) == 20 and server.connections == 4


async def test_at_max_connections_the_oldest_idle_connection_makes_room_for_a_new_one():
    servers = [Server(always(ok())) for _ in range(3)]
    async with servers[0], servers[1], servers[2], Http1Client(None, max_connections=2) as client:
        for server in servers:
            await client.request("GET", server.url + "/t", max_body=MAX)
        await within(servers[0].closed.wait(), MARGIN)
        assert not servers[1].closed.is_set()
        await client.request("GET", servers[2].url + "/t", max_body=MAX)
    assert [s.connections for s in servers] == [1, 1, 1]


def second_request_dropped(request: Request) -> Reply:
    """Answer a connection's first request; close it without a word at the second, as a
    peer that dropped an idle kept-alive connection does."""
    return ok() if request.index == 0 else None


async def test_a_request_on_a_reused_connection_the_server_dropped_is_sent_once_more():
    async with Server(second_request_dropped) as server, Http1Client(None) as client:
        for _ in range(3):
            assert (await client.request("GET", server.url + "/t", max_body=MAX)).status == 200
    assert server.connections == 3
    assert [(r.connection, r.index) for r in server.requests] == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (3, 0),
    ]


async def test_a_request_that_may_not_be_repeated_is_not_sent_once_more():
    async with Server(second_request_dropped) as server, Http1Client(None) as client:
        await client.request("POST", server.url + "/t", max_body=MAX, repeatable=False)
        with pytest.raises(Http1Disconnected, match="closed the connection without answering"):
            await client.request("POST", server.url + "/t", max_body=MAX, repeatable=False)
    assert len(server.requests) == 2 and server.connections == 1


async def test_a_new_connection_closed_without_an_answer_is_not_tried_again():
    async with Server(always(None)) as server, Http1Client(None) as client:
        with pytest.raises(Http1Disconnected, match="closed the connection without answering"):
            await client.request("GET", server.url + "/t", max_body=MAX)
    assert len(server.requests) == 1


async def test_an_answer_cut_short_is_not_sent_again():
    cut = Closing(answer("200 OK", ["Content-Length: 10"], b"abc"))
    async with Server(always(cut)) as server, Http1Client(None) as client:
        with pytest.raises(Http1Disconnected, match="after 3 of the body's 10 bytes"):
            await client.request("GET", server.url + "/t", max_body=MAX)
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- egress


class FakeDns:
    """``socket.getaddrinfo`` for ``*.rebind.test`` names: each call takes the next answer
    of the name's list (the last one repeats); ``"fail"`` does not resolve."""

    def __init__(self) -> None:
        self.answers: dict[str, list[str]] = {}
        self.asked: list[str] = []
        self._real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in self.answers:
            return self._real(host, port, *args, **kwargs)
        self.asked.append(name)
        queue = self.answers[name]
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        if address == "fail":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 0))]


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    fake = FakeDns()
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


@dataclass
class Diversion:
    """Where the client asked to connect; every connection goes to ``port`` on loopback."""

    port: int = 0
    asked: list[tuple[str, int, str | None]] = field(default_factory=list)


@pytest.fixture
def diverted(monkeypatch: pytest.MonkeyPatch) -> Diversion:
    diversion = Diversion()
    real = asyncio.open_connection

    async def open_connection(host: str, port: int, **kwargs: Any) -> Any:
        diversion.asked.append((host, port, kwargs.get("server_hostname")))
        return await real("127.0.0.1", diversion.port, **kwargs)

    monkeypatch.setattr(asyncio, "open_connection", open_connection)
    return diversion


async def test_the_policy_refuses_loopback_unless_it_allows_private_addresses():
    async with Server(always(ok())) as server:
        async with Http1Client(STRICT) as client:
            with pytest.raises(EgressRefused, match="is a loopback address"):
                await client.request("GET", server.url + "/t", max_body=MAX)
        assert server.connections == 0
        for policy in (PRIVATE_OK, EgressSettings(allowed_prefixes=[server.url]), None):
            async with Http1Client(policy) as client:
                assert (await client.request("GET", server.url + "/t", max_body=MAX)).status == 200


async def test_it_connects_to_the_address_the_policy_checked(dns: FakeDns, diverted: Diversion):
    """The name resolves to a public address when checked, then to a private one: the
    connection goes to the checked address, and Host keeps the name."""
    dns.answers["harness.rebind.test"] = ["203.0.113.10", "10.0.0.66"]
    async with Server(always(ok())) as server, Http1Client(STRICT) as client:
        diverted.port = server.port
        url = f"http://harness.rebind.test:{server.port}/runs"
        assert (await client.request("GET", url, max_body=MAX)).status == 200
    assert diverted.asked == [("203.0.113.10", server.port, None)]
    assert dns.asked == ["harness.rebind.test"]
    assert server.requests[0].headers["host"] == f"harness.rebind.test:{server.port}"


async def test_a_host_that_does_not_resolve_at_call_time_is_a_connect_error(dns: FakeDns):
    dns.answers["gone.rebind.test"] = ["fail"]
    async with Http1Client(STRICT) as client:
        with pytest.raises(Http1ConnectError, match="does not resolve"):
            await client.request("GET", "http://gone.rebind.test/x", max_body=MAX)


# --------------------------------------------------------------------------- TLS


@dataclass
class Tls:
    ca_file: Path
    server: ssl.SSLContext
    names_seen: list[str | None]


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    """A CA made for this test and a server certificate it signed for harness.rebind.test;
    the server context records the SNI name of each handshake."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        pytest.skip("the cryptography package is not installed: cannot make test certificates")

    now = datetime.now(UTC)

    def certificate(subject: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
            )
        )
        if ca:
            usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
            builder = builder.add_extension(usage, critical=True)
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = certificate("evalkit test CA", ca_key, "evalkit test CA", ca_key, ca=True)
    leaf = certificate("harness.rebind.test", leaf_key, "evalkit test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "leaf.key").write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    names_seen: list[str | None] = []
    server.sni_callback = lambda _socket, name, _context: names_seen.append(name)
    return Tls(tmp_path / "ca.pem", server, names_seen)


async def test_tls_checks_the_name_it_was_given_while_connecting_to_the_checked_address(
    tls: Tls, dns: FakeDns, diverted: Diversion, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_file))
    dns.answers["harness.rebind.test"] = ["203.0.113.10"]
    async with Server(always(ok(b"secure")), tls=tls.server) as server:
        diverted.port = server.port
        async with Http1Client(STRICT) as client:
            url = f"https://harness.rebind.test:{server.port}/capabilities"
            response = await client.request("GET", url, max_body=MAX)
    assert response.body == b"secure"
    assert diverted.asked == [("203.0.113.10", server.port, "harness.rebind.test")]
    assert tls.names_seen == ["harness.rebind.test"]


async def test_tls_refuses_a_certificate_no_trusted_ca_signed(
    tls: Tls, dns: FakeDns, diverted: Diversion, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    dns.answers["harness.rebind.test"] = ["203.0.113.10"]
    async with Server(always(ok()), tls=tls.server) as server:
        diverted.port = server.port
        async with Http1Client(STRICT) as client:
            with pytest.raises(Http1ConnectError, match="is not trusted") as caught:
                url = f"https://harness.rebind.test:{server.port}/capabilities"
                await client.request("GET", url, max_body=MAX)
    assert "SSL_CERT_FILE" in str(caught.value)
    assert server.requests == []


async def test_tls_refuses_a_trusted_certificate_for_another_name(
    tls: Tls, dns: FakeDns, diverted: Diversion, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_file))
    dns.answers["other.rebind.test"] = ["203.0.113.10"]
    async with Server(always(ok()), tls=tls.server) as server:
        diverted.port = server.port
        async with Http1Client(STRICT) as client:
            with pytest.raises(Http1ConnectError, match=r"(?i)hostname mismatch"):
                url = f"https://other.rebind.test:{server.port}/capabilities"
                await client.request("GET", url, max_body=MAX)
    assert tls.names_seen == ["other.rebind.test"] and server.requests == []


# --------------------------------------------------------------------------- HarnessClient


def json_answer(status: str, value: object) -> bytes:
    body = msgspec.json.encode(value)
    return answer(status, [f"Content-Length: {len(body)}", "Content-Type: application/json"], body)


async def test_the_harness_client_drives_the_reference_harness():
    start = RunStart(
        evalkit_run_id="1",
        input={"question": "What is 2 + 3?"},
        metadata=RunMetadata(case_id="case-1", experiment_id=1),
    )
    with ReferenceHarness() as ref:
        async with Http1Client(PRIVATE_OK) as http:
            client = HarnessClient(ref.url, None, http)
            assert (await client.capabilities()).api_version == "1"
            run = await client.start(start)
            assert (await client.start(start)).id == run.id, "the idempotency key holds"
            assert (await client.status(run.id)).status == "succeeded"
            assert msgspec.json.decode(await client.trajectory(run.id))["steps"]
            assert [r.id for r in (await client.list_runs()).runs] == [run.id]
            with pytest.raises(HarnessError) as bad_cursor:
                await client.list_runs(cursor="not a cursor")
    assert bad_cursor.value.status == 400 and not bad_cursor.value.retryable
    assert ref.counters.runs_created == 1


async def test_list_runs_sends_the_cursor_as_a_query_string():
    listing = {"runs": [], "next_cursor": None}
    server = Server(always(json_answer("200 OK", listing)))
    async with server, Http1Client(None) as http:
        await HarnessClient(server.url + "/", None, http).list_runs(cursor="a b/c&d")
    assert server.requests[0].target == "/runs?cursor=a+b%2Fc%26d"


@pytest.mark.parametrize(
    ("reply", "retryable", "says"),
    [
        (json_answer("503 Service Unavailable", {"e": "busy"}), True, "answered 503"),
        (json_answer("429 Too Many Requests", {}), True, "answered 429"),
        (json_answer("404 Not Found", {}), False, "answered 404"),
        (json_answer("501 Not Implemented", {}), False, "answered 501"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", True, "the status line is not HTTP/1.x"),
        (None, True, "closed the connection without answering"),
        (HANG, True, "no answer in time"),
    ],
    ids=["503", "429", "404", "501", "protocol-error", "no-answer", "timeout"],
)
async def test_harness_errors_say_whether_to_try_again(reply: Reply, retryable: bool, says: str):
    async with Server(always(reply)) as server, Http1Client(None, timeout=0.3) as http:
        with pytest.raises(HarnessError) as caught:
            await within(HarnessClient(server.url, "hk", http).capabilities(), 0.3 + MARGIN)
    assert caught.value.retryable is retryable
    assert str(caught.value).startswith(f"GET {server.url}/capabilities")
    assert says in str(caught.value)


async def test_a_harness_that_is_not_there_is_a_retryable_cannot_connect():
    async with Http1Client(None) as http:
        with pytest.raises(HarnessError, match="cannot connect") as caught:
            await HarnessClient(f"http://127.0.0.1:{unused_port()}", None, http).capabilities()
    assert caught.value.retryable


async def test_a_harness_answer_over_the_cap_is_not_retryable(monkeypatch):
    monkeypatch.setattr(harness_client, "MAX_BODY_BYTES", 2**20)
    huge = answer("200 OK", [f"Content-Length: {2**20 + 1}"])
    async with Server(always(huge)) as server, Http1Client(None) as http:
        with pytest.raises(HarnessError, match="answer larger than 1 MiB") as caught:
            await within(HarnessClient(server.url, None, http).trajectory("r1"), MARGIN)
    assert not caught.value.retryable


async def test_a_harness_quoting_the_key_back_does_not_leak_it():
    def reply(request: Request) -> bytes:
        said = f"invalid key '{request.headers['authorization']}'".encode()
        return answer("401 Unauthorized", [f"Content-Length: {len(said)}"], said)

    async with Server(reply) as server, Http1Client(None) as http:
        with pytest.raises(HarnessError) as caught:
            await HarnessClient(server.url, "sk-very-secret", http).capabilities()
    assert "sk-very-secret" not in str(caught.value)
    assert "invalid key 'Bearer [key hidden]'" in str(caught.value)


async def test_a_harness_call_on_a_dropped_connection_is_sent_again():
    caps = json_answer("200 OK", {"api_version": "1"})

    def reply(request: Request) -> Reply:
        return caps if request.index == 0 else None

    async with Server(reply) as server, Http1Client(None) as http:
        client = HarnessClient(server.url, None, http)
        for _ in range(3):
            assert (await client.capabilities()).api_version == "1"
    assert server.connections == 3 and len(server.requests) == 5
