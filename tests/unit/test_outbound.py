"""The egress policy and the outbound client, against a real HTTP server on loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from evalkit import __version__
from evalkit.config import EgressSettings
from evalkit.errors import BadRequest
from evalkit.outbound import EgressRefused, acheck_url, check_url, make_client

STRICT = EgressSettings()
PRIVATE_OK = EgressSettings(allow_private=True)


@pytest.mark.parametrize(
    ("url", "rule", "address"),
    [
        ("http://127.0.0.1:8080/runs", "loopback", "127.0.0.1"),
        ("http://127.1/", "loopback", "127.0.0.1"),
        ("http://10.1.2.3/", "private", "10.1.2.3"),
        ("http://172.16.0.9/", "private", "172.16.0.9"),
        ("http://172.31.255.1/", "private", "172.31.255.1"),
        ("https://192.168.1.10/", "private", "192.168.1.10"),
        ("http://100.100.100.200/latest/meta-data", "private", "100.100.100.200"),
        ("http://169.254.169.254/latest/meta-data/", "link-local", "169.254.169.254"),
        ("http://[::1]:9000/", "loopback", "::1"),
        ("http://[fe80::1]/", "link-local", "fe80::1"),
        ("http://[fd12:3456::1]/", "private", "fd12:3456::1"),
        ("http://[::ffff:127.0.0.1]/", "loopback", "::ffff:127.0.0.1"),
        ("http://0.0.0.0:8000/", "unspecified", "0.0.0.0"),
        ("http://[::]/", "unspecified", "::"),
        ("http://224.0.0.1/", "multicast", "224.0.0.1"),
    ],
)
def test_private_addresses_are_refused(url: str, rule: str, address: str):
    with pytest.raises(EgressRefused) as caught:
        check_url(url, STRICT)
    message = caught.value.message
    assert url in message
    assert address in message
    assert f"a {rule} address" in message
    assert "egress.allow_private" in message
    assert "egress.allowed_prefixes" in message
    assert "config.yaml" in message
    assert caught.value.code == "egress-refused"
    assert caught.value.status == 400
    assert isinstance(caught.value, BadRequest)
    # allow_private lifts every one of them
    check_url(url, PRIVATE_OK)


def test_metadata_address_is_named_as_such():
    with pytest.raises(EgressRefused, match="cloud metadata"):
        check_url("http://169.254.169.254/", STRICT)


def test_a_name_that_resolves_to_loopback_is_refused():
    with pytest.raises(EgressRefused) as caught:
        check_url("http://localhost:8123/", STRICT)
    message = caught.value.message
    assert "http://localhost:8123/" in message
    assert "localhost resolves to" in message
    assert "loopback" in message
    check_url("http://localhost:8123/", PRIVATE_OK)


def test_public_addresses_pass():
    check_url("https://93.184.216.34/v1", STRICT)
    check_url("http://[2606:2800:220:1::1]/", STRICT)
    check_url("http://8.8.8.8:8080/runs", STRICT)


def test_any_private_address_among_several_refuses(monkeypatch: pytest.MonkeyPatch):
    def two_answers(host, port, *args, **kwargs):
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_answers)
    with pytest.raises(EgressRefused, match=r"resolves to 10\.0\.0\.7, which is a private"):
        check_url("https://harness.example/", STRICT)


def test_a_host_that_does_not_resolve_is_refused_with_the_reason():
    with pytest.raises(EgressRefused, match="does not resolve"):
        check_url("http://no-such-host.invalid/", STRICT)


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "file:///etc/passwd", "gopher://10.0.0.1/", "javascript:1"]
)
def test_only_http_and_https(url: str):
    with pytest.raises(EgressRefused, match="only http and https"):
        check_url(url, PRIVATE_OK)


def test_a_url_without_host_is_refused():
    with pytest.raises(EgressRefused, match="no host"):
        check_url("http:///path", PRIVATE_OK)


def test_allowed_prefixes_admit_private_urls_and_only_them():
    policy = EgressSettings(allowed_prefixes=["http://127.0.0.1:9000/", "https://harness.internal"])
    check_url("http://127.0.0.1:9000/runs/1", policy)
    check_url("https://harness.internal", policy)
    check_url("https://HARNESS.internal/v1/runs", policy)
    check_url("https://harness.internal?x=1", policy)
    for url in (
        "http://127.0.0.1:9001/runs",  # another port
        "https://harness.internal.evil.example/",  # not at a boundary
        "https://harness.internal@evil.example/",  # userinfo trick
        "http://harness.internal/",  # another scheme
        "https://93.184.216.34/",  # public, but not listed
    ):
        with pytest.raises(EgressRefused) as caught:
            check_url(url, policy)
        assert "egress.allowed_prefixes" in caught.value.message
        assert "https://harness.internal" in caught.value.message


def test_allowed_prefixes_compare_normalised_paths():
    policy = EgressSettings(allowed_prefixes=["https://harness.internal/agents/"])
    with pytest.raises(EgressRefused):
        check_url("https://harness.internal/agents/../admin", policy)


async def test_acheck_url_matches_check_url():
    await acheck_url("http://8.8.8.8/", STRICT)
    await acheck_url("http://localhost/", PRIVATE_OK)
    with pytest.raises(EgressRefused, match="loopback"):
        await acheck_url("http://localhost/", STRICT)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = (self.headers.get("User-Agent") or "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def loopback_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def test_client_refuses_loopback_under_the_strict_policy(loopback_url: str):
    async with make_client(STRICT) as client:
        with pytest.raises(EgressRefused, match="loopback"):
            await client.get(f"{loopback_url}/hello")


async def test_client_reaches_loopback_when_the_policy_allows(loopback_url: str):
    for policy in (PRIVATE_OK, EgressSettings(allowed_prefixes=[loopback_url + "/"]), None):
        async with make_client(policy) as client:
            response = await client.get(f"{loopback_url}/hello")
        assert response.status_code == 200
        assert response.text == f"evalkit/{__version__}"


async def test_client_reaches_a_name_through_the_checked_address(loopback_url: str):
    port = loopback_url.rsplit(":", 1)[1]
    async with make_client(PRIVATE_OK) as client:
        response = await client.get(f"http://localhost:{port}/hello")
    assert response.status_code == 200


async def test_client_reports_an_unresolvable_host_as_a_connect_error():
    """At request time a DNS failure may pass: callers retry httpx transport errors."""
    async with make_client(STRICT) as client:
        with pytest.raises(httpx.ConnectError, match="does not resolve"):
            await client.get("http://no-such-host.invalid/")


async def test_client_does_not_follow_redirects(loopback_url: str):
    async with make_client(PRIVATE_OK) as client:
        response = await client.get(f"{loopback_url}/redirect")
    assert response.status_code == 302
    assert response.next_request is not None


async def test_client_sends_to_the_address_it_checked(monkeypatch: pytest.MonkeyPatch):
    """A name is resolved once, checked, and the request goes to that address with the
    name kept in Host and TLS SNI, so a second DNS answer cannot redirect it."""
    answers = iter(["93.184.216.34", "127.0.0.1"])

    def rebinding(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    client = make_client(STRICT, timeout=1.0)
    client._transport._inner = httpx.MockTransport(record)  # type: ignore[attr-defined]
    async with client:
        response = await client.get("https://harness.example/runs?x=1")
    assert response.status_code == 204
    assert response.request.url == "https://harness.example/runs?x=1"
    (sent,) = seen
    assert sent.url == "https://93.184.216.34/runs?x=1"
    assert sent.headers["host"] == "harness.example"
    assert sent.extensions["sni_hostname"] == "harness.example"


async def test_client_timeouts_and_headers():
    async with make_client(None, timeout=12.0, connect_timeout=3.0) as client:
        pass
    assert client.timeout.read == 12.0
    assert client.timeout.connect == 3.0
    assert client.follow_redirects is False
    assert client.headers["user-agent"] == f"evalkit/{__version__}"
