"""API endpoints as data: each one declares its body and answer types, so the OpenAPI
document is generated from the same Structs that validate requests."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalkit.auth import access
from evalkit.auth.access import ANONYMOUS, Actor
from evalkit.auth.oidc import looks_like_jwt, oidc_actor
from evalkit.auth.tokens import AGENT_PREFIX, token_digest
from evalkit.db import Database
from evalkit.edge.refusals import REFUSED, Refusal, refusal_for
from evalkit.errors import BadRequest, TooLarge, Unauthorized
from evalkit.model import api
from evalkit.store.accounts import resolve_login_token
from evalkit.store.agent_tokens import ResolvedAgentToken, resolve_agent_token

MAX_JSON_BODY = 8 * 2**20


@dataclass
class Call:
    """One API call as a handler sees it."""

    request: Request
    actor: Actor
    db: Database
    body_type: type | None = None
    body_limit: int = MAX_JSON_BODY
    token_id: int | None = None
    token_expires_at: Any = None
    agent_token_unchecked: int | None = None
    """The id of an agent token taken from an :class:`AgentTokenMemory`, until a query of
    this request has checked that it is still valid."""

    async def payload(self) -> Any:
        """The request body decoded into the endpoint's declared type. Handlers call it after
        their access check, so a refused caller learns nothing about body validation."""
        assert self.body_type is not None, "this endpoint declares no body"
        return await read_body(self.request, self.body_type, self.body_limit)

    @property
    def settings(self) -> Any:
        return self.request.app.state.settings

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    @property
    def address(self) -> str | None:
        """The client's address as the server saw it (login limits count per address)."""
        return self.request.client.host if self.request.client else None


Handler = Callable[[Call], Awaitable[Any]]


@dataclass
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    body: type | None = None
    returns: Any = None
    status: int = 200
    public: bool = False
    """Public endpoints skip authentication entirely (health, login, server info)."""
    tags: list[str] = field(default_factory=list)
    max_body: int = MAX_JSON_BODY
    """The largest JSON body this endpoint reads (413 above it)."""
    agent_tokens: bool = False
    """Agent tokens are taken too (the collector's routes); every other route refuses them."""
    refusals: tuple[int, ...] = ()
    """Statuses this endpoint may answer besides the success and those any endpoint of its
    kind may (``REFUSALS``); the OpenAPI document lists them all."""

    def describe(self, operation: dict[str, Any]) -> None:
        """Adjust this endpoint's OpenAPI operation in place: for endpoints that read and
        answer other media than JSON Structs (the OTLP collector)."""

    def route(self) -> Route:
        async def endpoint(request: Request) -> Response:
            return await self._serve(request)

        return Route(self.path, endpoint, methods=[self.method], name=self.handler.__name__)

    async def _serve(self, request: Request) -> Response:
        try:
            db: Database = request.app.state.db
            call = Call(
                request=request,
                actor=ANONYMOUS,
                db=db,
                body_type=self.body,
                body_limit=self.max_body,
            )
            if not self.public:
                await authenticate(call)
                access.require_authenticated(call.actor)
                if call.actor.agent_id is not None and not self.agent_tokens:
                    access.require_user(call.actor)  # agent tokens: the collector only
            result = await self.handler(call)
            if isinstance(result, Response):  # bytes, streamed: the handler built it
                return result
            return json_response(result, self.status)
        except REFUSED as exc:
            return refusal_response(refusal_for(exc))


def bearer_token(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None when there is no such header."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'", code="bad-token")
    return token.strip()


async def authenticate(call: Call, agent_tokens: AgentTokenMemory | None = None) -> None:
    """Resolve ``Authorization: Bearer <token>`` to an actor; no header leaves it anonymous.

    With ``agent_tokens``, an agent token this process resolved lately is taken from there
    without asking the database: the caller must then check it before it answers (see
    :class:`AgentTokenMemory`)."""
    token = bearer_token(call.request)
    if token is None:
        return
    if token.startswith(AGENT_PREFIX):
        # An agent token acts for its agent only: the collector takes it, every other
        # route refuses it (access.require_user, and _serve below).
        remembered = agent_tokens.get(token) if agent_tokens is not None else None
        if remembered is not None:
            call.actor = remembered.actor
            call.agent_token_unchecked = remembered.token_id
            return
        call.actor = (await _resolve_agent_token(call, token, agent_tokens)).actor
        return
    if looks_like_jwt(token):
        # An identity provider's access token (a machine client's, from client credentials).
        call.actor = await oidc_actor(call.request.app.state, call.db, token)
        return
    async with call.db.connection() as conn:
        resolved = await resolve_login_token(conn, token)
    call.actor = resolved.actor
    call.token_id = resolved.token_id
    call.token_expires_at = resolved.expires_at


@dataclass
class AgentTokenMemory:
    """The agent tokens one process resolved in the last ``seconds``, by digest.

    For a route that an exporter calls many times a second (the collector), where asking the
    database who a token is would cost a connection and a round trip each time. What it
    remembers is only which agent a token names; that the token is still valid is checked
    for every request all the same: inside the transaction that stores what the request
    carries (the caller passes ``Call.agent_token_unchecked`` to it), or by
    :func:`check_agent_token` when none ran. A revoked token is so refused at once, and an
    entry older than ``seconds`` is resolved again, which also records the token's use."""

    seconds: float
    found: dict[bytes, tuple[float, ResolvedAgentToken]] = field(default_factory=dict)
    limit: int = 10_000

    def get(self, token: str) -> ResolvedAgentToken | None:
        entry = self.found.get(token_digest(token))
        if entry is None or entry[0] <= time.monotonic():
            return None
        return entry[1]

    def put(self, token: str, resolved: ResolvedAgentToken) -> None:
        if len(self.found) >= self.limit:
            self.found.clear()
        self.found[token_digest(token)] = (time.monotonic() + self.seconds, resolved)

    def forget(self, token: str) -> None:
        self.found.pop(token_digest(token), None)


async def check_agent_token(call: Call, agent_tokens: AgentTokenMemory) -> None:
    """Check against the database an agent token taken from ``agent_tokens`` that no
    transaction of this request has checked (Unauthorized when it is no longer valid)."""
    if call.agent_token_unchecked is None:
        return
    call.agent_token_unchecked = None
    token = bearer_token(call.request)
    assert token is not None
    agent_tokens.forget(token)
    await _resolve_agent_token(call, token, agent_tokens)


async def _resolve_agent_token(
    call: Call, token: str, agent_tokens: AgentTokenMemory | None
) -> ResolvedAgentToken:
    """The agent token resolved by the database (Unauthorized when it is not valid), and
    remembered in ``agent_tokens`` when given."""
    async with call.db.connection() as conn:
        resolved = await resolve_agent_token(conn, token)
    if agent_tokens is not None:
        agent_tokens.put(token, resolved)
    return resolved


DRAIN_BYTES = 16 * 2**20
"""How much more of a body being refused as too large the edge reads (and drops)."""


async def drain(stream: AsyncIterator[bytes], budget: int = DRAIN_BYTES) -> None:
    """Read and drop the rest of a body being refused, so that a client still sending it
    reads the 413 rather than a connection closed under it; past ``budget`` it is cut off."""
    async for chunk in stream:
        budget -= len(chunk)
        if budget < 0:
            return


async def read_body(request: Request, struct: type, limit: int = MAX_JSON_BODY) -> Any:
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            await drain(stream)
            raise TooLarge(f"the request body is over {limit} bytes; send less")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        raise BadRequest(f"this call needs a JSON body ({struct.__name__})", code="bad-body")
    try:
        return msgspec.json.decode(raw, type=struct)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid {struct.__name__}: {exc}", code="bad-body") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", code="bad-body") from None
    except RecursionError:  # msgspec's guard against running out of stack
        raise BadRequest(
            f"the body's JSON is nested too deeply (arrays or objects inside one another "
            f"hundreds of levels deep) to be a {struct.__name__}: flatten it",
            code="bad-body",
        ) from None


_encoder = msgspec.json.Encoder()


def json_response(result: Any, status: int = 200) -> Response:
    if result is None and status == 204:
        return Response(status_code=204)
    return Response(_encoder.encode(result), status, media_type="application/json")


def refusal_response(refusal: Refusal) -> Response:
    """A refusal as evalkit's JSON error (``api.Error``)."""
    body = api.Error(error=api.ErrorBody(code=refusal.code, message=refusal.message))
    return Response(
        _encoder.encode(body),
        refusal.status,
        headers=refusal.headers,
        media_type="application/json",
    )


def error_response(status: int, code: str, message: str) -> Response:
    """An answer no exception of the table stands for (no such route, a failure)."""
    return refusal_response(Refusal(status, code, message))


REFUSALS = {
    400: "The body, a parameter or a value breaks a rule; the message names it",
    401: "Not logged in, or the credentials are not valid",
    403: "An access rule refused; the code names the rule",
    404: "The named thing does not exist",
    409: "It clashes with what exists, or with the thing's state",
    413: "The body is over this endpoint's size limit",
    415: "The body's content type or encoding is not one this endpoint reads",
    429: "Too many attempts or requests; Retry-After says when to try again",
    502: "A service evalkit called for this request (identity provider, harness) failed",
    503: "The database does not answer, or is not at the schema this server needs",
}
"""What each refusal status means; every refusal has an ``api.Error`` body."""


def refusal_statuses(ep: Endpoint) -> list[int]:
    """The statuses besides success that ``ep`` may answer: any endpoint's (a bad parameter
    or value, a missing thing, a clash, the database down), a logged-in endpoint's (who may
    call, and an identity provider's token checked against the provider), a body's size
    limit, and what the endpoint declares itself."""
    statuses = {400, 404, 409, 503, *ep.refusals}
    if not ep.public:
        statuses |= {401, 403, 502}
    if ep.body is not None:
        statuses.add(413)
    return sorted(statuses)


def openapi_document(endpoints: list[Endpoint], version: str) -> dict[str, Any]:
    """OpenAPI 3.1 generated from the endpoints' Structs."""
    types: list[Any] = [api.Error]
    for ep in endpoints:
        types.extend(t for t in (ep.body, ep.returns) if t is not None)
    schemas, components = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}"
    )
    by_type = dict(zip(types, schemas, strict=True))
    error_ref = by_type[api.Error]
    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        op: dict[str, Any] = {"summary": ep.summary, "operationId": ep.handler.__name__}
        if ep.tags:
            op["tags"] = ep.tags
        if ep.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": by_type[ep.body]}},
            }
        ok: dict[str, Any] = {"description": "Redirect" if 300 <= ep.status < 400 else "OK"}
        if ep.returns is not None:
            ok["content"] = {"application/json": {"schema": by_type[ep.returns]}}
        responses: dict[str, Any] = {str(ep.status): ok}
        for status in refusal_statuses(ep):
            responses[str(status)] = {
                "description": REFUSALS[status],
                "content": {"application/json": {"schema": error_ref}},
            }
        op["responses"] = responses
        params = [p.strip("{}") for p in ep.path.split("/") if p.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        if not ep.public:
            op["security"] = [{"bearer": []}]
        ep.describe(op)
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "evalkit API", "version": version},
        "paths": paths,
        "components": {
            "schemas": json.loads(msgspec.json.encode(components)),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
