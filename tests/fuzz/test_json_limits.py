"""Oversized and deeply nested JSON against a real server: the API's JSON endpoints and the
OTLP collector's JSON path. Each answer is a 4xx that names the problem, never a 5xx, and
the server goes on serving after each one."""

from __future__ import annotations

import gzip
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from evalkit.edge.endpoint import MAX_JSON_BODY
from tests.conftest import RunningServer

DEPTH = 100_000


@pytest.fixture(scope="module")
def admin(module_server: RunningServer, module_admin_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=module_server.url,
        headers={"Authorization": f"Bearer {module_admin_token}"},
        timeout=60,
    ) as client:
        r = client.post(
            "/api/workspaces/admin/agents",
            json={"name": "bot", "trajectory_source": "otel", "mapping": _starter()},
        )
        assert r.status_code == 201, r.text
        yield client


def _starter() -> dict:
    from evalkit.otel.mapping import load_starter

    return load_starter("openinference")


def still_serving(client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    who = client.get("/api/auth/whoami")
    assert who.status_code == 200 and who.json()["user"]["username"] == "admin"


def error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text[:500]
    return r.json()["error"]


def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


JSON = {"Content-Type": "application/json"}
OTLP_JSON = {**JSON, "X-Evalkit-Agent": "bot@admin"}


# --------------------------------------------------------------------------- size


def test_oversized_json_body_is_413_naming_the_limit(admin: httpx.Client) -> None:
    body = b'{"name": "' + b"x" * MAX_JSON_BODY + b'"}'
    r = admin.post("/api/workspaces", content=body, headers=JSON)
    assert str(MAX_JSON_BODY) in error(r, 413)["message"]
    still_serving(admin)


def test_oversized_chunked_json_body_is_413(admin: httpx.Client) -> None:
    """Without a Content-Length the edge counts what it reads and stops at the limit."""

    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(MAX_JSON_BODY // 2**16 + 2):
            yield b"x" * 2**16
        yield b'"}'

    r = admin.post("/api/workspaces", content=chunks(), headers=JSON)
    assert str(MAX_JSON_BODY) in error(r, 413)["message"]
    still_serving(admin)


def test_a_client_still_sending_a_refused_body_reads_the_413(
    admin: httpx.Client, module_server: RunningServer
) -> None:
    """The client goes on writing after the edge has seen enough to refuse: the edge reads
    (and drops) the rest, so the answer is not lost to a connection reset under it."""
    host, port = httpx.URL(module_server.url).host, httpx.URL(module_server.url).port
    piece = b"x" * 2**16
    head = (
        "POST /api/workspaces HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"Authorization: {admin.headers['Authorization']}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head.encode())
        for _ in range(MAX_JSON_BODY // len(piece) + 1):
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        time.sleep(0.5)  # the edge has refused by now: what follows arrives after
        for _ in range(16):
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        sock.sendall(b"0\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    still_serving(admin)


def test_oversized_otlp_json_is_413_naming_the_setting(
    admin: httpx.Client, module_server: RunningServer
) -> None:
    """Chunked (no Content-Length: a declared one over the limit is refused unread, see
    tests/integration/test_otel_bad_input.py), and gzip that inflates past the limit."""
    limit = module_server.settings.otel.max_batch_bytes

    def chunks() -> Iterator[bytes]:
        yield b'{"resourceSpans": [], "pad": "'
        for _ in range(limit // 2**16 + 2):
            yield b"x" * 2**16
        yield b'"}'

    r = admin.post("/api/otel/v1/traces", content=chunks(), headers=OTLP_JSON)
    assert f"otel.max_batch_bytes ({limit} bytes)" in error(r, 413)["message"]
    packed = gzip.compress(b"".join(chunks()))  # small on the wire, over the limit inflated
    r = admin.post(
        "/api/otel/v1/traces", content=packed, headers={**OTLP_JSON, "Content-Encoding": "gzip"}
    )
    assert "decompressed body is over otel.max_batch_bytes" in error(r, 413)["message"]
    still_serving(admin)


# --------------------------------------------------------------------------- depth


@pytest.mark.parametrize(
    ("open_", "close"), [("[", "]"), ('{"a":', "}")], ids=["arrays", "objects"]
)
def test_deeply_nested_json_body_is_400(admin: httpx.Client, open_: str, close: str) -> None:
    """100,000 levels at the top of a body: a 400 naming what is wrong (the Struct's
    decoder stops at the first level that is not the declared type)."""
    for path in ("/api/auth/login", "/api/workspaces", "/api/workspaces/admin/datasets/d/sync"):
        r = admin.post(path, content=nested(DEPTH, open_, close), headers=JSON)
        assert error(r, 400)["code"] == "bad-body", path
    still_serving(admin)


def test_deeply_nested_json_inside_a_free_form_field_is_400(admin: httpx.Client) -> None:
    """A case's content is any JSON: nesting there reaches the same limit."""
    content = b'{"input": {"question": ' + nested(DEPTH) + b"}}"
    body = b'{"cases": [{"id": "c1", "content": ' + content + b"}]}"
    r = admin.post("/api/workspaces/admin/datasets/deep/sync", content=body, headers=JSON)
    assert "nested too deeply" in error(r, 400)["message"]
    still_serving(admin)


@pytest.mark.parametrize("depth", [100, 400, 700, 900])
def test_nesting_below_the_decoder_limit_is_never_a_5xx(admin: httpx.Client, depth: int) -> None:
    """Nesting the decoder takes must not fail later: in the database (jsonb), in hashing
    or in re-encoding the content."""
    content = b'{"input": {"question": "q", "deep": ' + nested(depth) + b"}}"
    body = b'{"cases": [{"id": "c1", "content": ' + content + b"}]}"
    r = admin.post(f"/api/workspaces/admin/datasets/deep{depth}/sync", content=body, headers=JSON)
    assert r.status_code < 500, r.text[:500]
    if r.status_code == 200:
        case = admin.get("/api/workspaces/admin/cases/c1")
        assert case.status_code < 500, case.text[:500]
    mapping = b'{"mapping": {"session_id": ["session.id"], "deep": ' + nested(depth) + b"}}"
    r = admin.patch("/api/workspaces/admin/agents/bot", content=mapping, headers=JSON)
    assert r.status_code < 500, r.text[:500]
    still_serving(admin)


def test_deeply_nested_otlp_json_is_400(admin: httpx.Client) -> None:
    for body in (
        nested(DEPTH),
        b'{"resourceSpans": ' + nested(DEPTH) + b"}",
        # an attribute value nested in arrayValue far past protobuf's own depth limit
        b'{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": '
        + b'{"arrayValue": {"values": [' * 300
        + b'{"stringValue": "x"}'
        + b"]}}" * 300
        + b"}]}}]}",
    ):
        r = admin.post("/api/otel/v1/traces", content=body, headers=OTLP_JSON)
        body_error = error(r, 400)
        assert body_error["code"] == "not-traces", body_error
    still_serving(admin)
