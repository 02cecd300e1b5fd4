"""Schemathesis against the real server's ``/api/openapi.json``: every operation, as the
admin and as an anonymous caller, with bodies and path parameters generated from the
document (valid ones, and ones that break it). Each answer must not be a 5xx, its status
must be declared, and its body and content type must match what the document says.

Where an answer disagrees with the document, the document (``openapi_document``) or the
endpoint's declaration is what gets fixed, not this test.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from evalkit import __version__
from evalkit.edge.endpoint import openapi_document
from evalkit.edge.routes import ENDPOINTS
from evalkit.otel.mapping import load_starter
from tests.conftest import RunningServer
from tests.fuzz.conftest import examples, login


def no_unforeseen_constraint(ctx: Any, response: Any, case: Any) -> None:
    """A 409 that only names a database constraint means the input got past the checks
    that should have refused it with a message of their own (endpoint.py turns a stray
    IntegrityError into that answer)."""
    if response.status_code != 409 or b"constraint" not in response.content:
        return
    try:
        body = response.json()["error"]
    except (ValueError, KeyError, TypeError):  # the collector's protobuf answers
        body = {"code": "conflict", "message": response.content.decode(errors="replace")}
    if body["code"] == "conflict" and body["message"].rstrip().endswith(")"):
        raise AssertionError(f"input reached a database constraint: {body['message']}")


CHECKS = [
    not_a_server_error,
    no_unforeseen_constraint,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
PER_OPERATION = examples(10)
"""Examples per operation as the admin, and per public operation anonymously."""
ANONYMOUS_EXAMPLES = examples(3)
"""Examples per logged-in operation anonymously: each is refused (401) before it reads
anything, so a few show that the refusal is declared and well formed."""

DOCUMENT = openapi_document(ENDPOINTS, __version__)
OPERATIONS = sorted(
    (
        pytest.param(method.upper(), path, id=f"{method.upper()} {path}")
        for path, ops in DOCUMENT["paths"].items()
        for method in ops
    ),
    # Deletes last, so the seeded things they may remove serve the other operations first.
    key=lambda param: param.values[0] == "DELETE",
)
# Nothing is skipped. The server runs no worker, so the operations that start real work
# (experiments, resumes, re-fetches) only queue jobs nobody takes; harness and judge calls
# name agents and providers that answer nothing. Logout would end the admin's token, so
# it gets tokens of its own (logout_tokens).
LOGOUT = ("POST", "/api/auth/logout")

SESSION = "s1"
TRACE = "5b8efff798038103d269b633813fc60c"
KNOWN = {
    "workspace": "dev",
    "username": "alice",
    "dataset": "finance",
    "case_id": "c1",
    "agent": "bot",
    "version": "1",
    "experiment": "1",
    "other": "1",
    "run": "1",
    "token": "1",
    "session": SESSION,
    "sha256": hashlib.sha256(b"fixture").hexdigest(),
}
"""Path parameters that name the seeded things: half the examples of an operation use
them (where it has such parameters), so its handler gets past the lookups."""


def _seed(server: RunningServer, token: str) -> None:
    """A shared workspace with a member, a synced dataset, a code-driven agent with a
    token, a trace session and an SDK experiment with its runs."""

    def api(method: str, path: str, body: Any = None, **kw: Any) -> Any:
        r = httpx.request(
            method,
            server.url + path,
            json=body,
            headers={"Authorization": f"Bearer {kw.pop('bearer', token)}", **kw},
            timeout=30,
        )
        assert r.status_code < 400, (path, r.text)
        return r.json() if r.content else None

    api("POST", "/api/users", {"username": "alice", "password": "alice-password-1"})
    api("POST", "/api/workspaces", {"name": "dev"})
    api("POST", "/api/workspaces/dev/members", {"username": "alice", "role": "writer"})
    case = {"input": {"question": "2+2?"}, "expected": {"answer": "4"}}
    case["evaluators"] = {"exact_match": True}
    api(
        "POST",
        "/api/workspaces/dev/datasets/finance/sync",
        {"cases": [{"id": "c1", "content": case}]},
    )
    agent = {"name": "bot", "mapping": load_starter("openinference")}
    api("POST", "/api/workspaces/dev/agents", agent)
    agent_token = api("POST", "/api/workspaces/dev/agents/bot/tokens", {"note": "fuzz"})["token"]
    span = {
        "traceId": TRACE,
        "spanId": "eee19b7ec3c1b174",
        "name": "agent",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": "session.id", "value": {"stringValue": SESSION}}],
    }
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    api("POST", "/api/otel/v1/traces", export, bearer=agent_token)
    api("POST", "/api/experiments", {"dataset": "finance@dev", "agent": "bot@dev", "sdk": True})


@pytest.fixture(scope="module")
def schema(module_server: RunningServer, module_admin_token: str) -> Any:
    _seed(module_server, module_admin_token)
    return schemathesis.openapi.from_url(f"{module_server.url}/api/openapi.json")


@pytest.fixture(scope="module")
def logout_tokens(module_server: RunningServer) -> Iterator[str]:
    """Fresh admin tokens for the logout operation, minted before any login is fuzzed (the
    login limits would refuse them later); once used up, the last one stays (revoked: 401,
    a path worth walking too)."""
    tokens = [login(module_server) for _ in range(3)]

    def take() -> Iterator[str]:
        while len(tokens) > 1:
            yield tokens.pop()
        while True:
            yield tokens[0]

    return take()


NASTY = [
    "\u00b2",  # a digit to str.isdigit, not to int()
    "9" * 5000,  # past int()'s digit limit
    "99999999999999999999",  # past a bigint
    "-1",
    "0",
    " 1",
    "\x00",  # PostgreSQL text cannot hold it
    "a@b@c",
    "..",
    "\U0001f4a5" * 300,
]
"""Path parameter values that broke, or could break, a handler's parsing: a third of the
examples of an operation with path parameters use one of them for every parameter."""


def _strategy(operation: Any) -> st.SearchStrategy:
    """Valid and invalid requests; with any path parameters, the seeded names, or NASTY."""
    names = [p.name for p in operation.path_parameters]
    known = {name: KNOWN[name] for name in names if name in KNOWN}
    groups = [[{}]]
    if known:
        groups.append([known])
    if names:
        groups.append([dict.fromkeys(names, value) for value in NASTY])
    strategies = []
    for pins in groups:
        group = []
        for pinned in pins:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                # Nothing may be left to make invalid (no body, every parameter pinned).
                with contextlib.suppress(Exception):
                    group.append(
                        operation.as_strategy(generation_mode=mode, path_parameters=pinned)
                    )
        strategies.append(st.one_of(group))
    return st.one_of(strategies)


def _run(
    schema: Any,
    server: RunningServer,
    method: str,
    path: str,
    headers: Any,
    caplog: pytest.LogCaptureFixture,
    examples: int = PER_OPERATION,
) -> None:
    operation = schema[path][method]
    caplog.set_level(logging.ERROR, logger="evalkit")

    @settings(
        max_examples=examples,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(case=_strategy(operation))
    def check(case: Any) -> None:
        caplog.clear()
        try:
            case.call_and_validate(
                base_url=server.url, headers=headers(), checks=CHECKS, allow_redirects=False
            )
        except Exception:
            # A 500 says "see its log": put the server's traceback in the report.
            for record in caplog.records:
                if record.exc_text:
                    print(record.getMessage(), record.exc_text, sep="\n")
            raise

    check()


def test_served_document_is_generated_from_the_endpoints(module_server: RunningServer) -> None:
    served = httpx.get(f"{module_server.url}/api/openapi.json")
    assert served.status_code == 200
    assert served.json() == DOCUMENT
    assert len(OPERATIONS) == sum(1 for _ in ENDPOINTS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_admin(
    method: str,
    path: str,
    schema: Any,
    module_server: RunningServer,
    module_admin_token: str,
    logout_tokens: Iterator[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def headers() -> dict[str, str]:
        token = next(logout_tokens) if (method, path) == LOGOUT else module_admin_token
        # The collector's spans are for the seeded agent (a user token must name one).
        return {"Authorization": f"Bearer {token}", "X-Evalkit-Agent": "bot@dev"}

    _run(schema, module_server, method, path, headers, caplog)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_anonymous(
    method: str,
    path: str,
    schema: Any,
    module_server: RunningServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    public = "security" not in DOCUMENT["paths"][path][method.lower()]
    examples = PER_OPERATION if public else ANONYMOUS_EXAMPLES
    _run(schema, module_server, method, path, dict, caplog, examples)
