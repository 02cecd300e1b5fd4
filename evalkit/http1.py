"""A small asyncio HTTP/1.1 client for the Harness API's hot path.

Why it exists: the worker drives every run through the Harness API (a start, status polls,
the trajectory). Measured on a 2-core machine against the reference harness with 32 requests
in flight, httpx (:func:`evalkit.outbound.make_client`) spent 1.3 to 2.2 ms of client CPU per
request where a bare asyncio-streams keep-alive client spent 0.09 ms, so two calls per run
were some 40% of the worker's CPU. This client does what the Harness API needs and no more:
HTTP/1.1 on a keep-alive pool; Content-Length, chunked and close-delimited bodies; no
redirects, cookies, proxies, compression or HTTP/2. The judge and the remote evaluators
make few calls and stay on httpx.

The egress policy is :mod:`evalkit.outbound`'s, applied as it applies it there: every
request is checked, and when the check resolved the host the connection goes to the
address it checked, while ``Host``, TLS SNI and the certificate check keep the name.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import quote, urlsplit

from evalkit import outbound
from evalkit.config import EgressSettings
from evalkit.errors import EvalkitError

__all__ = [
    "Http1BodyTooLarge",
    "Http1Client",
    "Http1ConnectError",
    "Http1Disconnected",
    "Http1Error",
    "Http1InvalidRequest",
    "Http1ProtocolError",
    "Http1Response",
    "Http1Timeout",
]

MAX_HEAD_BYTES = 64 * 1024
"""The largest header block (status line and headers, or a chunked body's trailers) read."""

KEEPALIVE_EXPIRY = 5.0
"""Seconds an idle connection is kept for reuse (httpx's default). A peer or a NAT box may
drop an idle connection without a word; a request sent into one would wait out the whole
timeout instead of being sent again at once."""

_READ_AT_ONCE = 2**20
"""A body up to this size is read in one piece; a larger one in pieces, so the reader's
buffer and the body are not both held whole."""

_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([1-9][0-9][0-9])(?: [^\r\n\x00]*)?")
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):([^\r\n\x00]*)")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n\x00]*)?\r\n")
_UNSAFE_HEADER_TEXT = re.compile(r"[\r\n\x00]")
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
"""Characters kept as they are in a request target: percent-escapes stay as given."""
_NO_BODY_STATUSES = (204, 304)
_CONTENT_LENGTH_REQUIRED = ("POST", "PUT", "PATCH")


# --------------------------------------------------------------------------- errors


class Http1Error(EvalkitError):
    """A request failed; ``detail`` says what happened, the message adds to which URL."""

    def __init__(self, method: str, url: str, detail: str) -> None:
        super().__init__(f"{method} {url}: {detail}")
        self.method = method
        self.url = url
        self.detail = detail


class Http1InvalidRequest(Http1Error):
    """The request cannot be sent as given: a URL that is not http(s), has no host or a bad
    port, or a header with a line break in it. Sending it again cannot help."""


class Http1ConnectError(Http1Error):
    """No connection: refused, unreachable, an unresolvable host, a failed TLS handshake."""


class Http1Timeout(Http1Error):
    """No connection within ``connect_timeout``, or no whole answer within ``timeout``."""


class Http1Disconnected(Http1Error):
    """The connection closed or broke before the whole answer arrived."""


class Http1ProtocolError(Http1Error):
    """The answer is not HTTP/1.1 (a malformed status line, header, chunk size...)."""


class Http1BodyTooLarge(Http1Error):
    """The answer's body is over the request's ``max_body``; the rest was not read."""


class _Failed(Exception):
    """Raised while reading an answer; :meth:`Http1Client._exchange` adds method and URL."""

    public: type[Http1Error] = Http1ProtocolError

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class _Malformed(_Failed):
    public = Http1ProtocolError


class _Oversized(_Failed):
    public = Http1BodyTooLarge


class _Closed(_Failed):
    public = Http1Disconnected


class _NoResponse(_Closed):
    """Not one byte of an answer: a kept-alive connection the peer had closed, so a
    repeatable request may go again on a new connection."""


# --------------------------------------------------------------------------- the client


@dataclass(frozen=True, slots=True)
class Http1Response:
    status: int
    headers: dict[str, str]
    """Lower-cased names; a header given more than once has its values joined by ', '."""
    body: bytes


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    """Without IPv6 brackets: what is connected to (absent a checked address) and TLS checks."""
    port: int
    host_header: str


_Key = tuple[str, str, int, str | None]
"""(scheme, host, port, the address the egress check resolved the host to)."""


class Http1Client:
    """Sends requests over a keep-alive pool of at most ``max_connections`` connections,
    under the egress ``policy`` (None: no policy, the CLI calling the user's own agents).

    ``connect_timeout`` bounds opening a connection (TLS included), ``timeout`` the whole
    exchange after that. Redirects are returned like any status, never followed.
    """

    def __init__(
        self,
        policy: EgressSettings | None,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 100,
    ) -> None:
        self._policy = policy
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._pool = _Pool(max_connections)
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        max_body: int,
        repeatable: bool = True,
    ) -> Http1Response:
        """Send one request and read its whole answer.

        ``repeatable``: the request may be sent twice, so one that went out on a reused
        kept-alive connection and got not one byte back (the peer had closed it) is sent
        once more on a new connection. Raises :class:`Http1Error` subclasses, and
        :class:`evalkit.outbound.EgressRefused` when the policy refuses the URL.
        """
        if self._closed:
            raise RuntimeError(f"{method} {url}: this Http1Client is closed (aclose was called)")
        address = await self._check(method, url)
        origin, target = _split(method, url)
        key: _Key = (origin.scheme, origin.host, origin.port, address)
        payload = _request_bytes(method, url, target, origin, headers, body)
        async with self._slots:
            conn = self._pool.take(key)
            if conn is not None:
                try:
                    return await self._exchange(conn, key, method, url, payload, max_body)
                except _NoResponse as exc:
                    if not repeatable:
                        raise Http1Disconnected(method, url, exc.detail) from None
            conn = await self._connect(origin, address, method, url)
            try:
                return await self._exchange(conn, key, method, url, payload, max_body)
            except _NoResponse as exc:
                raise Http1Disconnected(method, url, exc.detail) from None

    async def aclose(self) -> None:
        """Close the idle connections; a connection in use closes when its request ends."""
        self._closed = True
        await self._pool.close_idle()

    async def __aenter__(self) -> Http1Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _check(self, method: str, url: str) -> str | None:
        """The policy's check of ``url``; the address to connect to when it resolved one."""
        if self._policy is None:
            return None
        try:
            address = await outbound._acheck(url, self._policy)
        except outbound._Unresolvable as exc:
            # A DNS failure at call time may pass: a connection error, which callers retry.
            raise Http1ConnectError(method, url, f"cannot connect ({exc.message})") from None
        return None if address is None else str(address)

    async def _connect(
        self, origin: _Origin, address: str | None, method: str, url: str
    ) -> _Connection:
        tls = self._tls_context() if origin.scheme == "https" else None
        self._pool.reserve()
        try:
            async with asyncio.timeout(self._connect_timeout):
                reader, writer = await asyncio.open_connection(
                    address or origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                    limit=MAX_HEAD_BYTES,
                )
        except BaseException as exc:
            self._pool.unreserve()
            if isinstance(exc, TimeoutError):
                detail = f"no connection within {self._connect_timeout:g} s"
                raise Http1Timeout(method, url, detail) from None
            if isinstance(exc, OSError):
                raise Http1ConnectError(method, url, _connect_failure(exc, origin)) from None
            raise
        return _Connection(reader, writer)

    async def _exchange(
        self, conn: _Connection, key: _Key, method: str, url: str, payload: bytes, max_body: int
    ) -> Http1Response:
        """Send ``payload`` on ``conn`` and read the answer; ``conn`` goes back to the pool
        when it may carry another request, and is closed otherwise."""
        try:
            async with asyncio.timeout(self._timeout):
                await _send(conn.writer, payload)
                response, reusable = await _read_response(conn.reader, method, max_body)
        except BaseException as exc:
            self._pool.discard(conn)
            error = _public_error(exc, method, url, self._timeout)
            if error is exc:
                raise
            raise error from None
        if reusable and not self._closed:
            self._pool.put(key, conn)
        else:
            self._pool.discard(conn)
        return response

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = _default_tls_context()
        return self._tls


def _public_error(exc: BaseException, method: str, url: str, timeout: float) -> BaseException:
    """The error an exchange that raised ``exc`` raises (``exc`` itself for cancellation and
    for a request that got no answer at all, which :meth:`Http1Client.request` handles)."""
    if isinstance(exc, _NoResponse):
        return exc
    if isinstance(exc, _Failed):
        return exc.public(method, url, exc.detail)
    if isinstance(exc, TimeoutError):
        return Http1Timeout(method, url, f"no whole answer within {timeout:g} s")
    if isinstance(exc, OSError):
        return Http1Disconnected(method, url, f"the connection broke ({exc})")
    return exc


def _connect_failure(exc: OSError, origin: _Origin) -> str:
    where = f"{origin.host}:{origin.port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"cannot connect (the TLS certificate of {where} is not trusted: "
            f"{exc.verify_message or exc}); give the harness a certificate from a public CA "
            "for this name, or set SSL_CERT_FILE to a bundle that holds the CA that signed it"
        )
    if isinstance(exc, ssl.SSLError):
        return f"cannot connect (the TLS handshake with {where} failed: {exc})"
    return f"cannot connect to {where} ({exc.strerror or exc})"


def _default_tls_context() -> ssl.SSLContext:
    """The CAs httpx trusts: SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's bundle."""
    if os.environ.get("SSL_CERT_FILE"):
        context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    elif os.environ.get("SSL_CERT_DIR"):
        context = ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    else:
        try:
            import certifi
        except ImportError:
            context = ssl.create_default_context()
        else:
            context = ssl.create_default_context(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


# --------------------------------------------------------------------------- the pool


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def may_be_reused(self, now: float) -> bool:
        # A peer that closed an idle connection has usually been heard by now (EOF read);
        # the one that closes it as the request goes out is what sending once more is for.
        return (
            now - self.idle_since < KEEPALIVE_EXPIRY
            and not self.reader.at_eof()
            and self.reader.exception() is None
            and not self.writer.is_closing()
        )


class _Pool:
    """Idle connections by key, and a count of every open one (idle, in use, connecting).

    :class:`Http1Client` holds a slot of its semaphore (``max_connections`` of them) for
    each request, so when the count is at the limit and a request needs a new connection,
    at least one connection is idle: the oldest is closed to make room.
    """

    def __init__(self, max_connections: int) -> None:
        self._idle: dict[_Key, list[_Connection]] = {}
        self._open = 0
        self._max = max_connections

    def take(self, key: _Key) -> _Connection | None:
        """The most recently used idle connection for ``key`` that may still be reused."""
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if conn.may_be_reused(now):
                return conn
            self.discard(conn)
        return None

    def put(self, key: _Key, conn: _Connection) -> None:
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.setdefault(key, []).append(conn)

    def reserve(self) -> None:
        """Count a connection about to be opened, closing the oldest idle one at the limit."""
        if self._open >= self._max:
            self._close_oldest_idle()
        self._open += 1

    def unreserve(self) -> None:
        self._open -= 1

    def discard(self, conn: _Connection) -> None:
        conn.writer.close()
        self._open -= 1

    async def close_idle(self) -> None:
        idle = [conn for conns in self._idle.values() for conn in conns]
        self._idle.clear()
        for conn in idle:
            self.discard(conn)
        waits = [conn.writer.wait_closed() for conn in idle]
        if waits:
            # A TLS peer that never acknowledges the close must not hold up a shutdown.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.gather(*waits, return_exceptions=True)

    def _close_oldest_idle(self) -> None:
        oldest: list[_Connection] | None = None
        for conns in self._idle.values():
            if conns and (oldest is None or conns[0].idle_since < oldest[0].idle_since):
                oldest = conns
        if oldest is not None:
            self.discard(oldest.pop(0))


# --------------------------------------------------------------------------- the request


def _split(method: str, url: str) -> tuple[_Origin, str]:
    """The origin to connect to and the request target (path and query) of ``url``."""
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise Http1InvalidRequest(method, url, f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise Http1InvalidRequest(
            method, url, f"only http and https URLs can be requested, not '{parts.scheme}'"
        )
    if not host:
        raise Http1InvalidRequest(method, url, "the URL has no host")
    if "@" in parts.netloc:
        raise Http1InvalidRequest(
            method,
            url,
            "the URL holds credentials (user@host), which this client does not send; "
            "remove them and give the harness's key as the agent's API key",
        )
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            detail = f"its host is not a valid name ({exc})"
            raise Http1InvalidRequest(method, url, detail) from None
    default_port = 443 if parts.scheme == "https" else 80
    port = port or default_port
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default_port else f"{shown}:{port}"
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return _Origin(parts.scheme, host, port, host_header), quote(target, safe=_URL_SAFE)


def _request_bytes(
    method: str,
    url: str,
    target: str,
    origin: _Origin,
    headers: Mapping[str, str] | None,
    body: bytes | None,
) -> bytes:
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {origin.host_header}",
        f"User-Agent: {outbound.USER_AGENT}",
    ]
    for name, value in (headers or {}).items():
        if _UNSAFE_HEADER_TEXT.search(name) or _UNSAFE_HEADER_TEXT.search(value):
            # The value is not shown: it may be a key.
            raise Http1InvalidRequest(
                method, url, f"the {name!r} header holds a line break or NUL; remove it"
            )
        lines.append(f"{name}: {value}")
    if body is not None or method in _CONTENT_LENGTH_REQUIRED:
        # Some proxies answer 411 to a POST without a length, as httpx knows.
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


async def _send(writer: asyncio.StreamWriter, payload: bytes) -> None:
    try:
        writer.write(payload)
        await writer.drain()
    except OSError as exc:
        # Nothing was read: on a reused connection this is the peer having closed it.
        raise _NoResponse(f"the connection broke as the request went out ({exc})") from None


# --------------------------------------------------------------------------- the answer


async def _read_response(
    reader: asyncio.StreamReader, method: str, max_body: int
) -> tuple[Http1Response, bool]:
    """The answer, and whether the connection may carry another request."""
    version, status, headers = _parse_head(await _read_head(reader, first=True))
    while 100 <= status < 200:
        if status == 101:
            raise _Malformed("the server switched protocols (101), which was not asked for")
        version, status, headers = _parse_head(await _read_head(reader, first=False))
    reusable = _keeps_alive(version, headers)
    if method == "HEAD" or status in _NO_BODY_STATUSES:
        return Http1Response(status, headers, b""), reusable
    if "transfer-encoding" in headers:
        body = await _read_chunked(reader, headers["transfer-encoding"], max_body)
        # A length beside chunked framing smells of request smuggling: never reuse.
        reusable = reusable and "content-length" not in headers
    elif "content-length" in headers:
        length = _content_length(headers["content-length"])
        if length > max_body:
            raise _Oversized(_too_large(max_body, f"it announced {length} bytes"))
        body = await _read_exactly(reader, length)
    else:
        body = await _read_until_close(reader, max_body)
        reusable = False
    return Http1Response(status, headers, body), reusable


async def _read_head(reader: asyncio.StreamReader, *, first: bool) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if first and not exc.partial:
            raise _NoResponse("the server closed the connection without answering") from None
        raise _Closed("the server closed the connection in the middle of the headers") from None
    except asyncio.LimitOverrunError:
        raise _Malformed(f"the header block is over {MAX_HEAD_BYTES // 1024} KiB") from None
    except OSError as exc:
        if first:
            raise _NoResponse(f"the connection broke before an answer ({exc})") from None
        raise


def _parse_head(head: bytes) -> tuple[int, int, dict[str, str]]:
    """(minor HTTP version, status, headers) of a header block ending in CRLF CRLF."""
    status_line, *lines = head[:-4].split(b"\r\n")
    matched = _STATUS_LINE.fullmatch(status_line)
    if matched is None:
        raise _Malformed(f"the status line is not HTTP/1.x: {status_line[:100]!r}")
    return int(matched[1]), int(matched[2]), _parse_fields(lines)


def _parse_fields(lines: list[bytes]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in lines:
        matched = _HEADER_LINE.fullmatch(line)
        if matched is None:
            raise _Malformed(f"a header line is malformed: {line[:100]!r}")
        name = matched[1].decode("ascii").lower()
        value = matched[2].strip(b" \t").decode("latin-1")
        fields[name] = f"{fields[name]}, {value}" if name in fields else value
    return fields


def _keeps_alive(version: int, headers: dict[str, str]) -> bool:
    tokens = {token.strip() for token in headers.get("connection", "").lower().split(",")}
    return "close" not in tokens if version == 1 else "keep-alive" in tokens


def _content_length(value: str) -> int:
    # The same length given twice ("12, 12") is allowed; two different lengths are not.
    lengths = {part.strip() for part in value.split(",")}
    length = lengths.pop() if len(lengths) == 1 else ""
    if not (length.isascii() and length.isdigit()):
        raise _Malformed(f"Content-Length is not one whole number: {value[:100]!r}")
    return int(length)


def _too_large(max_body: int, found: str) -> str:
    return f"the answer is larger than the {max_body} bytes allowed ({found})"


async def _read_exactly(reader: asyncio.StreamReader, length: int) -> bytes:
    if length <= _READ_AT_ONCE:
        try:
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            raise _body_cut(len(exc.partial), length) from None
    body = io.BytesIO()
    await _copy_exactly(reader, length, body)
    return body.getvalue()


async def _copy_exactly(reader: asyncio.StreamReader, length: int, into: io.BytesIO) -> None:
    remaining = length
    while remaining:
        piece = await reader.read(min(remaining, _READ_AT_ONCE))
        if not piece:
            raise _body_cut(length - remaining, length)
        into.write(piece)
        remaining -= len(piece)


def _body_cut(got: int, length: int) -> _Closed:
    return _Closed(f"the server closed the connection after {got} of the body's {length} bytes")


async def _read_chunked(reader: asyncio.StreamReader, coding: str, max_body: int) -> bytes:
    if coding.strip().lower() != "chunked":
        raise _Malformed(f"Transfer-Encoding {coding[:100]!r} is not supported (only chunked)")
    body = io.BytesIO()
    while size := _chunk_size(await _read_line(reader)):
        if body.tell() + size > max_body:
            raise _Oversized(_too_large(max_body, f"a chunk takes it past {body.tell()} bytes"))
        if size <= _READ_AT_ONCE:
            body.write(await _read_chunk_part(reader, size))
        else:
            await _copy_exactly(reader, size, body)
        if await _read_chunk_part(reader, 2) != b"\r\n":
            raise _Malformed("a chunk does not end with CRLF where its size says")
    await _read_trailers(reader)
    return body.getvalue()


async def _read_chunk_part(reader: asyncio.StreamReader, size: int) -> bytes:
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise _Closed("the server closed the connection in the middle of a chunk") from None


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n")
    except asyncio.IncompleteReadError:
        raise _Closed("the server closed the connection before the last chunk") from None
    except asyncio.LimitOverrunError:
        raise _Malformed(f"a chunk-size line is over {MAX_HEAD_BYTES // 1024} KiB") from None


def _chunk_size(line: bytes) -> int:
    matched = _CHUNK_SIZE.fullmatch(line)
    if matched is None:
        raise _Malformed(f"a chunk size is not hexadecimal: {line[:100]!r}")
    return int(matched[1], 16)


async def _read_trailers(reader: asyncio.StreamReader) -> None:
    """Read (and check, then drop) the trailer fields after the last chunk."""
    lines: list[bytes] = []
    read = 0
    while (line := await _read_line(reader)) != b"\r\n":
        read += len(line)
        if read > MAX_HEAD_BYTES:
            raise _Malformed(f"the trailers are over {MAX_HEAD_BYTES // 1024} KiB")
        lines.append(line[:-2])
    _parse_fields(lines)


async def _read_until_close(reader: asyncio.StreamReader, max_body: int) -> bytes:
    body = io.BytesIO()
    while piece := await reader.read(_READ_AT_ONCE):
        if body.tell() + len(piece) > max_body:
            raise _Oversized(_too_large(max_body, "it ends with the connection"))
        body.write(piece)
    return body.getvalue()
