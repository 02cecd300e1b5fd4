"""Outbound HTTP: the egress policy for user-supplied URLs and the one httpx client factory.

Harness, evaluator and judge URLs come from users, so a server that called them blindly
could be pointed at its own loopback services or at a cloud metadata endpoint. The policy
(``egress`` in config.yaml, :class:`evalkit.config.EgressSettings`) decides:

1. The scheme must be ``http`` or ``https``.
2. When ``allowed_prefixes`` is non-empty, the URL must start with one of them, and then it
   is allowed even when its host is private. A prefix matches at a boundary:
   ``https://a.example`` matches ``https://a.example/x`` but not ``https://a.example.org``.
3. Otherwise, unless ``allow_private`` is true, the host must not be, nor resolve to (every
   address getaddrinfo returns), a loopback, private, link-local, unspecified, multicast or
   reserved address (see ``_BLOCKED``).

:func:`make_client` checks every request before it is sent and, when it resolved the host
to check it, connects to the address it checked, so a DNS answer that changes between the
check and the connection cannot reach a private address. It never follows redirects.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from evalkit import __version__
from evalkit.config import EgressSettings
from evalkit.errors import BadRequest

__all__ = ["EgressRefused", "acheck_url", "check_url", "make_client", "once_more_if_dropped"]

T = TypeVar("T")

USER_AGENT = f"evalkit/{__version__}"

_FIX = (
    "set egress.allow_private: true, or add a prefix of this URL to egress.allowed_prefixes "
    "(then only listed prefixes are allowed), in the server's config.yaml"
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_BLOCKED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("loopback", ("127.0.0.0/8", "::1/128")),
    (
        "private",
        ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fec0::/10"),
    ),
    ("link-local", ("169.254.0.0/16", "fe80::/10")),
    ("unspecified", ("0.0.0.0/8", "::/128")),
    ("multicast", ("224.0.0.0/4", "ff00::/8")),
    ("reserved", ("240.0.0.0/4",)),
)
_NETWORKS = [(rule, ipaddress.ip_network(net)) for rule, nets in _BLOCKED for net in nets]


class EgressRefused(BadRequest):
    code = "egress-refused"


class _Unresolvable(EgressRefused):
    """The host did not resolve: refused by :func:`check_url`, but a transient failure (an
    ``httpx.ConnectError``, which callers retry) when it happens on a request."""


@dataclass(frozen=True, slots=True)
class _Target:
    url: str
    host: str
    port: int


def check_url(url: str, policy: EgressSettings) -> None:
    """Raise :class:`EgressRefused` unless ``policy`` lets the server call ``url``.

    Resolves the host with getaddrinfo when the policy depends on its addresses; in async
    code use :func:`acheck_url`, which does that in a thread.
    """
    target = _needs_resolving(url, policy)
    if target is not None:
        _check_addresses(target, _resolve(target))


async def acheck_url(url: str, policy: EgressSettings) -> None:
    """:func:`check_url` for async code: the DNS lookup runs in a thread."""
    await _acheck(url, policy)


async def _acheck(url: str, policy: EgressSettings) -> IPAddress | None:
    """Check ``url``; return the address to connect to when the check resolved the host."""
    target = _needs_resolving(url, policy)
    if target is None:
        return None
    literal = _as_address(target.host)
    addresses = [literal] if literal is not None else await asyncio.to_thread(_resolve, target)
    _check_addresses(target, addresses)
    return addresses[0]


def _needs_resolving(url: str, policy: EgressSettings) -> _Target | None:
    """Apply the rules that need no DNS; return the target when its addresses decide."""
    parsed = _parse(url)
    if parsed.scheme not in ("http", "https"):
        raise EgressRefused(
            f"refused the outbound call to {url}: only http and https URLs are allowed, "
            f"not '{parsed.scheme}'"
        )
    if not parsed.host:
        raise EgressRefused(f"refused the outbound call to {url}: the URL has no host")
    if policy.allowed_prefixes:
        normal = str(parsed)
        if any(_starts_with(normal, prefix) for prefix in policy.allowed_prefixes):
            return None
        raise EgressRefused(
            f"refused the outbound call to {url}: it starts with none of "
            f"egress.allowed_prefixes ({', '.join(policy.allowed_prefixes)}); add a prefix "
            "for it to egress.allowed_prefixes in the server's config.yaml"
        )
    if policy.allow_private:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return _Target(url=url, host=parsed.host, port=port)


def _parse(url: str) -> httpx.URL:
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise EgressRefused(
            f"refused the outbound call to {url}: not a valid URL ({exc})"
        ) from None


def _starts_with(url: str, prefix: str) -> bool:
    try:
        normal = str(httpx.URL(prefix))
    except httpx.InvalidURL:
        return False
    if not url.startswith(normal):
        return False
    # A match must end at a boundary, so https://a.example does not admit https://a.example.org
    # or https://a.example@elsewhere.
    rest = url[len(normal) :]
    return normal.endswith("/") or not rest or rest[0] in "/?#"


def _resolve(target: _Target) -> list[IPAddress]:
    literal = _as_address(target.host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise _Unresolvable(
            f"refused the outbound call to {target.url}: its host {target.host} does not "
            f"resolve ({exc}), so the server cannot check where it points; check the URL"
        ) from None
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = _as_address(str(sockaddr[0]))
        if address is not None and address not in addresses:
            addresses.append(address)
    if not addresses:
        raise EgressRefused(
            f"refused the outbound call to {target.url}: its host {target.host} resolves to "
            "no IP address; check the URL"
        )
    return addresses


def _as_address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _blocked_rule(address: IPAddress) -> str | None:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return _blocked_rule(address.ipv4_mapped)
        address = ipaddress.IPv6Address(address.packed)  # drop a %zone
    for rule, network in _NETWORKS:
        if address.version == network.version and address in network:
            return rule
    return None


def _check_addresses(target: _Target, addresses: list[IPAddress]) -> None:
    for address in addresses:
        rule = _blocked_rule(address)
        if rule is None:
            continue
        where = (
            f"{target.host} is"
            if _as_address(target.host) is not None
            else f"{target.host} resolves to {address}, which is"
        )
        note = " (cloud metadata services live there)" if rule == "link-local" else ""
        raise EgressRefused(
            f"refused the outbound call to {target.url}: {where} a {rule} address{note}, and "
            f"the egress policy refuses {rule} addresses; if the server should reach it, {_FIX}"
        )


class _PolicyTransport(httpx.AsyncBaseTransport):
    """Checks each request against the policy, then sends it to the checked address."""

    def __init__(self, inner: httpx.AsyncBaseTransport, policy: EgressSettings) -> None:
        self._inner = inner
        self._policy = policy

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            address = await _acheck(str(request.url), self._policy)
        except _Unresolvable as exc:
            raise httpx.ConnectError(exc.message, request=request) from None
        if address is not None and _as_address(request.url.host) is None:
            # Connect to the address that passed the check; Host and TLS SNI keep the name.
            extensions = dict(request.extensions)
            extensions.setdefault("sni_hostname", request.url.host)
            request = httpx.Request(
                request.method,
                request.url.copy_with(host=str(address)),
                headers=request.headers,
                stream=request.stream,
                extensions=extensions,
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def make_client(
    policy: EgressSettings | None,
    *,
    timeout: float = 30.0,
    connect_timeout: float = 5.0,
    max_connections: int = 100,
) -> httpx.AsyncClient:
    """The httpx client for every outbound call evalkit makes.

    ``policy`` None means no egress policy (the CLI calling the user's own agents). Redirects
    are returned, never followed: a redirect could point past the policy. A request the
    policy refuses raises :class:`EgressRefused` (not an httpx error: retrying cannot help);
    a host that does not resolve raises ``httpx.ConnectError`` like any unreachable host.
    """
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=min(max_connections, 20)
    )
    transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(limits=limits)
    if policy is not None:
        transport = _PolicyTransport(transport, policy)
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout, connect=connect_timeout),
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
    )


async def once_more_if_dropped(send: Callable[[], Awaitable[T]]) -> T:
    """Await ``send()``; when the peer closed or reset the pooled kept-alive connection it
    went out on without answering (``RemoteProtocolError`` or ``ReadError``, as load
    balancers do to idle connections), send it once more, which httpx does on a new
    connection.

    Only for calls that may be repeated: a judge's completion and a remote evaluator's
    scoring request are. (Harness API calls go through :mod:`evalkit.http1`, which does the
    same for them.)
    """
    try:
        return await send()
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return await send()
