"""The exception -> refusal table, and the API, the collector and the web pages rendering it:
the same status for the same exception, each in its own format."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from starlette.requests import Request
from starlette.responses import Response

from evalkit import outbound
from evalkit.auth.access import Actor
from evalkit.db import IntegrityError, ValueRefused
from evalkit.edge import app as edge_app
from evalkit.edge.endpoint import Endpoint
from evalkit.edge.refusals import REFUSED, RETRY_AFTER_DATABASE, TABLE, refusal_for
from evalkit.edge.routes import otel
from evalkit.edge.routes.meta import NotReady
from evalkit.errors import (
    ApiError,
    BadGateway,
    BadRequest,
    ConfigError,
    Conflict,
    DatabaseError,
    EvalkitError,
    Forbidden,
    NotFound,
    TooLarge,
    TooManyRequests,
    Unauthorized,
)
from evalkit.web.page import Page

# Each exception the edge refuses with, and what it answers today: (status, code, message).
EXPECTED: list[tuple[Exception, tuple[int, str, str]]] = [
    (BadRequest("b"), (400, "bad-request", "b")),
    (BadRequest("b", code="bad-body"), (400, "bad-body", "b")),
    (outbound.EgressRefused("e"), (400, "egress-refused", "e")),
    (outbound._Unresolvable("h"), (400, "egress-refused", "h")),
    (Unauthorized("u"), (401, "not-logged-in", "u")),
    (Forbidden("shared-writers-write", "f"), (403, "shared-writers-write", "f")),
    (NotFound("n"), (404, "not-found", "n")),
    (Conflict("c"), (409, "conflict", "c")),
    (TooLarge("t"), (413, "too-large", "t")),
    (TooManyRequests("slow down", retry_after=30), (429, "too-many-attempts", "slow down")),
    (BadGateway("g"), (502, "upstream-failed", "g")),
    (NotReady("r"), (503, "not-ready", "r")),
    (
        otel.CollectorRefusal(415, "unsupported-media-type", "m"),
        (415, "unsupported-media-type", "m"),
    ),
    (
        otel.CollectorRefusal(429, "collector-busy", "busy", retry_after=1),
        (429, "collector-busy", "busy"),
    ),
    (
        IntegrityError("users_username_key", "taken"),
        (409, "conflict", "taken (users_username_key)"),
    ),
    (ValueRefused("nul"), (400, "bad-value", "nul")),
    (DatabaseError("down"), (503, "database-unavailable", "down")),
]
SAMPLES = [exc for exc, _ in EXPECTED]


def _subclasses(kind: type) -> set[type]:
    found = set(kind.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_exception_type_maps_once():
    kinds = [kind for kind, _ in TABLE]
    assert len(set(kinds)) == len(kinds)
    for index, kind in enumerate(kinds):
        shadowing = [earlier for earlier in kinds[:index] if issubclass(kind, earlier)]
        assert not shadowing, f"{kind.__name__}'s row is never reached: {shadowing} comes first"


def test_every_refusal_of_evalkit_has_a_case_here():
    assert edge_app  # imports every route module, so their ApiError subclasses exist
    sampled = {type(exc) for exc in SAMPLES}
    evalkit_kinds = {k for k in _subclasses(ApiError) if k.__module__.startswith("evalkit.")}
    assert evalkit_kinds <= sampled, f"add a case to EXPECTED for {evalkit_kinds - sampled}"
    assert {kind for kind, _ in TABLE} <= sampled | {ApiError}


@pytest.mark.parametrize(("exc", "expected"), EXPECTED, ids=lambda v: type(v).__name__)
def test_the_table_says_status_code_and_message(exc: Exception, expected: tuple):
    refusal = refusal_for(exc)
    assert (refusal.status, refusal.code, refusal.message) == expected


def test_retry_after_per_format():
    assert refusal_for(TooManyRequests("x", retry_after=30)).headers["Retry-After"] == "30"
    database = refusal_for(DatabaseError("down"))
    assert "Retry-After" not in database.headers  # the API never sent one
    assert database.collector_headers["Retry-After"] == str(RETRY_AFTER_DATABASE)
    assert refusal_for(Unauthorized("u")).headers == {"WWW-Authenticate": "Bearer"}


@pytest.mark.parametrize("exc", [ConfigError("c"), EvalkitError("e"), ValueError("v")])
def test_other_exceptions_are_not_refusals(exc: Exception):
    assert not isinstance(exc, REFUSED)
    with pytest.raises(TypeError, match="not a refusal"):
        refusal_for(exc)


# --------------------------------------------------------------------------- the renderers


def _request(path: str, headers: dict[str, str] | None = None) -> Request:
    app = SimpleNamespace(state=SimpleNamespace(db=None, settings=None))
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b""}
    return Request({**scope, "headers": raw, "app": app})


def _raising(exc: Exception):
    async def handler(call: object) -> Response:
        raise exc

    return handler


async def _api(exc: Exception) -> Response:
    endpoint = Endpoint("POST", "/api/x", _raising(exc), "test", public=True)
    return await endpoint._serve(_request("/api/x"))


async def _collector(exc: Exception, media: str, monkeypatch: pytest.MonkeyPatch) -> Response:
    async def as_a_user(call: object, agent_tokens: object = None) -> None:
        call.actor = Actor(user_id=1, username="u")  # type: ignore[attr-defined]

    monkeypatch.setattr(otel, "authenticate", as_a_user)
    endpoint = otel.CollectorEndpoint("POST", "/api/otel/v1/traces", _raising(exc), "test")
    return await endpoint._serve(_request("/api/otel/v1/traces", {"content-type": media}))


async def _page(exc: Exception) -> Response:
    page = Page("POST", "/x", _raising(exc), public=True)
    return await page._serve(_request("/x"))


def _refusal_headers(response: Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k in ("retry-after", "www-authenticate")}


@pytest.mark.parametrize(("exc", "expected"), EXPECTED, ids=lambda v: type(v).__name__)
async def test_three_renderers_give_one_status(exc, expected, monkeypatch):
    status, code, message = expected
    api = await _api(exc)
    assert api.status_code == status
    assert json.loads(api.body)["error"] == {"code": code, "message": message}

    collector_headers = _refusal_headers(api)
    if isinstance(exc, DatabaseError) and not isinstance(exc, ValueRefused):
        collector_headers["retry-after"] = str(RETRY_AFTER_DATABASE)  # exporters retry a 503
    for media in ("application/json", "application/x-protobuf"):
        collector = await _collector(exc, media, monkeypatch)
        assert (collector.status_code, collector.media_type) == (status, media)
        assert _refusal_headers(collector) == collector_headers
        if media == "application/json":
            assert json.loads(collector.body)["error"] == {"code": code, "message": message}

    page = await _page(exc)
    if isinstance(exc, Unauthorized):  # a browser goes to the login page instead
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        return
    assert page.status_code == status
    assert f"<code>{code}</code>" in page.body.decode()
    assert _refusal_headers(page) == _refusal_headers(api)


@pytest.mark.parametrize("exc", [ConfigError("c"), ValueError("v")])
async def test_what_is_not_a_refusal_reaches_the_unhandled_handler(exc, monkeypatch):
    with pytest.raises(type(exc)):
        await _api(exc)
    with pytest.raises(type(exc)):
        await _collector(exc, "application/json", monkeypatch)
    with pytest.raises(type(exc)):
        await _page(exc)
