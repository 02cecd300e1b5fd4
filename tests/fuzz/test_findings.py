"""Regression tests for what the fuzz tests found, one per finding, each named after what it
broke. They replay the exact inputs, so they fail fast and plainly if a finding comes back."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from evalkit.model.names import whole_number
from evalkit.otel.otlp import NotTraces, decode_json
from tests.conftest import RunningServer


@pytest.fixture(scope="module")
def admin(module_server: RunningServer, module_admin_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=module_server.url,
        headers={"Authorization": f"Bearer {module_admin_token}"},
        timeout=30,
    ) as client:
        yield client


def error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text[:500]
    return r.json()["error"]


def test_login_with_an_empty_username_hit_the_login_failures_key_check(
    module_server: RunningServer,
) -> None:
    """Was 409 "login_failures_key_format": the failure was recorded under the key "user:",
    which the table refuses, and the address was not counted either."""
    r = httpx.post(f"{module_server.url}/api/auth/login", json={"username": "", "password": "x"})
    assert error(r, 401)["code"] == "bad-credentials"


def test_nul_character_in_text_was_a_503_database_unavailable(admin: httpx.Client) -> None:
    """PostgreSQL text cannot hold U+0000; psycopg's DataError was answered as the database
    being down (503, with clients retrying). It is the caller's value: 400 bad-value."""
    r = httpx.post(f"{admin.base_url}/api/auth/login", json={"username": "a\x00b", "password": "x"})
    assert error(r, 400)["code"] == "bad-value"
    body = error(admin.get("/api/workspaces/a%00b"), 400)
    assert body["code"] == "bad-value" and "NUL character" in body["message"]
    r = admin.post("/api/workspaces", json={"name": "ok"})
    assert r.status_code == 201, r.text  # the pool's connections are fine after it


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/{n}",
        "/api/experiments/{n}",
        "/api/experiments/{n}/brief",
        "/api/experiments/{n}/compare/{n}/cases",
        "/api/schedules/{n}",
        "/api/tokens/{n}/revoke",
        "/api/workspaces/admin/agents/a/mappings/{n}",
        "/api/workspaces/admin/cases/c/versions/{n}",
        "/api/traces?limit={n}",
        "/api/audit?limit={n}",
        "/api/experiments?limit={n}",
        "/api/trace-sessions?limit={n}",
        "/api/fixtures/{sha}?expires={n}&signature=s",
    ],
)
@pytest.mark.parametrize("n", ["²", "9" * 5000], ids=["superscript-two", "5000-digits"])
def test_isdigit_numbers_int_cannot_read_were_a_500(admin: httpx.Client, path: str, n: str) -> None:
    """``str.isdigit`` is true of '²' and of 5000 digits; ``int`` refuses both (ValueError,
    500). Now a 400 that says a whole number is expected (or, for a schedule, a 404 or a
    400 about the name it is then read as)."""
    method = "POST" if path.endswith("/revoke") else "GET"
    r = admin.request(method, path.format(n=n, sha="0" * 64))
    assert r.status_code in (400, 403, 404), r.text[:300]


def test_whole_number_reads_ascii_digits_only() -> None:
    assert whole_number("42") == 42 and whole_number("0") == 0
    assert whole_number("9" * 18) == 10**18 - 1
    for text in (None, "", "²", "١٢", "9" * 19, "9" * 5000, "-1", " 1", "1_0", "+1", "1.0"):
        assert whole_number(text) is None, text


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000])
def test_deeply_nested_otlp_json_was_a_recursion_error(body: bytes) -> None:
    """msgspec raises RecursionError past Python's limit; the collector answered 500."""
    with pytest.raises(NotTraces, match="nested deeper"):
        decode_json(body)


def test_deeply_nested_api_json_was_a_500(admin: httpx.Client) -> None:
    body = b'{"cases": [{"id": "c1", "content": {"input": ' + b"[" * 100_000 + b"}}]}"
    r = admin.post(
        "/api/workspaces/admin/datasets/d/sync",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert "nested too deeply" in error(r, 400)["message"]


def test_openapi_declared_too_few_statuses(admin: httpx.Client) -> None:
    """Schemathesis saw answers the document did not declare: login's 401, /cli's 302 (now
    a 200 page), and (by reading the edge) 413 over a body's limit and 503 with the
    database down."""
    doc = admin.get("/api/openapi.json").json()["paths"]
    assert {"401", "429"} <= set(doc["/api/auth/login"]["post"]["responses"])
    assert "200" in doc["/cli"]["get"]["responses"]
    assert {"413", "503"} <= set(doc["/api/workspaces"]["post"]["responses"])
    collector = doc["/api/otel/v1/traces"]["post"]
    assert {"413", "415", "429"} <= set(collector["responses"])
    assert set(collector["requestBody"]["content"]) == {
        "application/x-protobuf",
        "application/json",
    }


def test_nul_in_a_session_attribute_refused_the_whole_batch(admin: httpx.Client) -> None:
    """A span whose session attribute held U+0000 made the batch's session row unstorable:
    503 (the exporter retried it forever), then 400 for every span of the batch. The
    session id now holds U+FFFD in its place, as span names already did."""
    from evalkit.otel.mapping import load_starter

    r = admin.post(
        "/api/workspaces/admin/agents",
        json={"name": "nul-bot", "mapping": load_starter("openinference")},
    )
    assert r.status_code == 201, r.text
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "agent",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": "session.id", "value": {"stringValue": "a\u0000b"}}],
    }
    r = admin.post(
        "/api/otel/v1/traces",
        json={"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]},
        headers={"X-Evalkit-Agent": "nul-bot@admin"},
    )
    assert r.status_code == 200 and r.json() == {}, r.text
    sessions = admin.get("/api/workspaces/admin/agents/nul-bot/sessions").json()
    assert [s["session_id"] for s in sessions] == ["a\ufffdb"]


def test_nul_in_the_web_login_form_was_a_503_page(module_server: RunningServer) -> None:
    """The web pages answered the same DataError as "database down" (503)."""
    r = httpx.post(f"{module_server.url}/login", data={"username": "a\x00b", "password": "x"})
    assert r.status_code == 400 and "NUL character" in r.text


def test_nul_in_json_content_was_named_as_an_unsupported_escape(admin: httpx.Client) -> None:
    """jsonb refuses \\u0000 with "unsupported Unicode escape sequence"; the answer now
    says what the value holds and what to do, as for text."""
    case = {"input": {"question": "a\x00b"}}
    r = admin.post(
        "/api/workspaces/admin/datasets/nul/sync", json={"cases": [{"id": "c1", "content": case}]}
    )
    body = error(r, 400)
    assert body["code"] == "bad-value" and "NUL character" in body["message"], body
