"""The OTLP/HTTP collector (``POST /api/otel/v1/traces``) and the reads of stored traces.

The collector answers in the request's encoding (protobuf or JSON), per the OTLP/HTTP spec:
200 with ``partial_success`` when some spans are refused, 400 for a body that is not a
trace export, 401/403/404 for who is sending and for which agent, 413 over
``otel.max_batch_bytes`` (also after decompression), 415 for other content types and
encodings, 429 when every ingest slot is busy and 503 when the database does not answer
(both with Retry-After). The 200 is sent after the batch is committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal

import msgspec
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from evalkit.auth import access
from evalkit.auth.access import ANONYMOUS
from evalkit.config import OtelSettings
from evalkit.db import Database
from evalkit.edge.endpoint import (
    AgentTokenMemory,
    Call,
    Endpoint,
    authenticate,
    check_agent_token,
    drain,
)
from evalkit.edge.refusals import REFUSED, Refusal, refusal_for
from evalkit.errors import (
    ApiError,
    BadRequest,
    DatabaseError,
    Forbidden,
    NotFound,
    TooLarge,
)
from evalkit.jobs.queue import defer_settles
from evalkit.model import otel as wire
from evalkit.model.names import parse_ref, whole_number
from evalkit.otel.otlp import Decoded, Incoming, NotTraces, decode_json, decode_protobuf
from evalkit.store import otel as store
from evalkit.store.agents import AgentRow, get_agent, get_agent_by_id
from evalkit.store.workspaces import get_workspace

log = logging.getLogger("evalkit.otel")

AGENT_HEADER = "x-evalkit-agent"
SLOT_WAIT_SECONDS = 2.0
"""How long a batch waits for an ingest slot before the answer is 429."""
RETRY_AFTER_BUSY = 1
MAX_MESSAGE = 2000
"""The longest error or partial-success message sent back (clients cap what they read)."""

Encoding = Literal["protobuf", "json"]

# google.rpc.Code values for the Status body of a refusal.
_GRPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}


class CollectorRefusal(ApiError):
    """A collector answer other than 200, with its status chosen per instance."""

    def __init__(
        self, status: int, code: str, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.retry_after = retry_after


# --------------------------------------------------------------------------- encodings


def request_encoding(request: Request) -> Encoding | None:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media in ("application/x-protobuf", "application/protobuf"):
        return "protobuf"
    if media == "application/json":
        return "json"
    return None


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_protobuf(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (code = field 1, message = field 2), encoded by hand: the
    message type is not part of opentelemetry-proto."""
    text = message.encode()
    head = b"\x08" + _varint(code) if code else b""
    return head + b"\x12" + _varint(len(text)) + text


_json = msgspec.json.Encoder()


def refusal_response(encoding: Encoding | None, refusal: Refusal) -> Response:
    """A refusal as a ``google.rpc.Status`` in the request's encoding (JSON when unknown)."""
    status = refusal.status
    message = refusal.message[:MAX_MESSAGE]
    code = _GRPC_CODE.get(status, 2)
    headers = refusal.collector_headers
    if encoding == "protobuf":
        return Response(
            status_protobuf(code, message),
            status,
            headers=headers,
            media_type="application/x-protobuf",
        )
    # The google.rpc.Status JSON fields, plus evalkit's usual error object (its rule code).
    error = {"code": refusal.code, "message": message}
    body = {"code": code, "message": message, "error": error}
    return Response(_json.encode(body), status, headers=headers, media_type="application/json")


def success_response(encoding: Encoding, rejected: int, message: str) -> Response:
    message = message[:MAX_MESSAGE]
    if encoding == "protobuf":
        answer = ExportTraceServiceResponse()
        if rejected or message:
            answer.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
            )
        return Response(answer.SerializeToString(), 200, media_type="application/x-protobuf")
    body: dict[str, Any] = {}
    if rejected or message:
        body["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
    return Response(_json.encode(body), 200, media_type="application/json")


# --------------------------------------------------------------------------- the endpoint


class CollectorEndpoint(Endpoint):
    """An endpoint whose every answer, refusals included, is in the request's encoding,
    and which alone accepts agent tokens."""

    def describe(self, operation: dict[str, Any]) -> None:
        # The body is an OTLP export (ExportTraceServiceRequest), and every answer is in
        # its encoding: protobuf, or the OTLP/JSON mapping (refusals add evalkit's error).
        binary = {"type": "string", "format": "binary"}
        export = {"type": "object", "properties": {"resourceSpans": {"type": "array"}}}
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/x-protobuf": {"schema": binary},
                "application/json": {"schema": export},
            },
        }
        for status, answer in operation["responses"].items():
            content = answer.setdefault("content", {})
            content["application/x-protobuf"] = {"schema": binary}
            if status == "200":
                content["application/json"] = {"schema": {"type": "object"}}

    async def _serve(self, request: Request) -> Response:
        encoding = request_encoding(request)
        call = Call(request=request, actor=ANONYMOUS, db=request.app.state.db)
        tokens = agent_tokens(request)
        try:
            try:
                await authenticate(call, tokens)
                access.require_authenticated(call.actor)
                response: Response = await self.handler(call)
            except REFUSED:
                await check_agent_token(call, tokens)  # a revoked token's 401 comes first
                raise
            await check_agent_token(call, tokens)  # when no batch was stored to check it
            return response
        except REFUSED as exc:  # 409 too: the agent deleted while its batch was stored
            return refusal_response(encoding, refusal_for(exc))
        except ClientDisconnect:  # nobody reads the answer
            return Response(status_code=400)


TOKEN_MEMORY_SECONDS = 60.0
"""How long an edge process remembers which agent an agent token names (each batch still
checks the token in its own transaction; see AgentTokenMemory). agent_token_resolve records a
token's use at most once a minute, so this loses none of it."""

MAPPING_TTL_SECONDS = 5.0
"""How long an agent's session attribute names are reused before the mapping is read again
(a newly activated mapping applies to batches at most this much later)."""


@dataclass
class Collector:
    """Per-process collector state: the ingest slots, the partitions known to exist, and
    each agent's session attribute names, read from its active mapping."""

    slots: asyncio.Semaphore
    days: set[date] = field(default_factory=set)
    names: dict[int, tuple[float, list[str]]] = field(default_factory=dict)

    async def session_names(self, conn: Any, agent_id: int) -> list[str]:
        now = time.monotonic()
        cached = self.names.get(agent_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        names = await store.session_names(conn, agent_id)
        if len(self.names) > 10_000:
            self.names.clear()
        self.names[agent_id] = (now + MAPPING_TTL_SECONDS, names)
        return names

    async def cached_session_names(self, db: Database, agent_id: int) -> list[str]:
        """:meth:`session_names`, on a connection of its own when the cache has none."""
        cached = self.names.get(agent_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        async with db.connection() as conn:
            return await self.session_names(conn, agent_id)

    async def ensure_day(self, db: Database, day: date) -> None:
        if day in self.days:
            return
        async with db.connection() as conn:
            await store.ensure_partition(conn, day)
        self.days.add(day)


def agent_tokens(request: Request) -> AgentTokenMemory:
    """This process's memory of the agent tokens the collector resolved lately."""
    state = request.app.state
    found = getattr(state, "collector_agent_tokens", None)
    if found is None:
        found = state.collector_agent_tokens = AgentTokenMemory(TOKEN_MEMORY_SECONDS)
    return found  # type: ignore[no-any-return]


def collector(call: Call) -> Collector:
    state = call.request.app.state
    found = getattr(state, "otel_collector", None)
    if found is None:
        slots = max(1, call.settings.database.pool_max - 2)
        found = state.otel_collector = Collector(asyncio.Semaphore(slots))
    return found  # type: ignore[no-any-return]


async def _target_agent(call: Call) -> int:
    """The id of the agent the spans are for: the agent token's, or the one X-Evalkit-Agent
    names (then the user must be allowed to write to its workspace)."""
    named = call.request.headers.get(AGENT_HEADER, "").strip()
    actor = call.actor
    if actor.agent_id is not None and not named:
        return actor.agent_id
    async with call.db.connection() as conn:
        if actor.agent_id is not None:
            agent = await get_agent_by_id(conn, actor.agent_id)
            ref = parse_ref(named, "agent")
            if (ref.name, ref.workspace or agent.workspace) != (agent.name, agent.workspace):
                raise Forbidden(
                    "agent-token-scope",
                    f"this token sends spans for {agent.ref}, not {named}; drop the "
                    f"X-Evalkit-Agent header or mint a token for {named} "
                    f"({access.RULES['agent-token-scope']})",
                )
            return agent.id
        if not named:
            raise BadRequest(
                "name the agent these spans belong to: send the header "
                "'X-Evalkit-Agent: NAME@WORKSPACE' (or send with an agent token, which "
                "implies it)",
                code="agent-required",
            )
        ref = parse_ref(named, "agent")
        ws = await get_workspace(conn, actor, ref.workspace or str(actor.username))
        access.require_write(actor, ws.facts, "send spans for its agents")
        return (await get_agent(conn, ws.id, ref.name)).id


def _decompressor(request: Request) -> Any:
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()
    raise CollectorRefusal(
        415,
        "unsupported-encoding",
        f"Content-Encoding {coding!r} is not supported; send gzip, deflate or no compression",
    )


async def read_capped(request: Request, limit: int, decompressor: Any) -> bytes:
    """The body, decompressed, refused with 413 as soon as it (or what it decompresses to)
    passes ``limit``: a gzip bomb never takes more than ``limit`` bytes of memory."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(_too_large(limit, "the body"))
    parts: list[bytes] = []
    received = produced = 0
    stream = request.stream()
    try:
        async for chunk in stream:
            received += len(chunk)
            if received > limit:
                await drain(stream)
                raise TooLarge(_too_large(limit, "the body"))
            if decompressor is None:
                parts.append(chunk)
                continue
            while chunk:
                piece = decompressor.decompress(chunk, limit - produced + 1)
                produced += len(piece)
                if produced > limit:
                    await drain(stream)
                    raise TooLarge(_too_large(limit, "the decompressed body"))
                parts.append(piece)
                chunk = decompressor.unconsumed_tail
        if decompressor is not None:
            if not decompressor.eof and received:
                raise BadRequest(
                    "the compressed body ends early (truncated gzip or deflate stream)",
                    code="bad-compression",
                )
            if decompressor.unused_data:
                raise BadRequest(
                    "the body has bytes after the end of its compressed stream",
                    code="bad-compression",
                )
    except zlib.error as exc:
        raise BadRequest(
            f"the body is not valid {request.headers.get('content-encoding')} data: {exc}",
            code="bad-compression",
        ) from None
    return b"".join(parts)


def _too_large(limit: int, what: str) -> str:
    return (
        f"{what} is over otel.max_batch_bytes ({limit} bytes); send smaller batches (e.g. the "
        "batch span processor's max_export_batch_size) or raise the limit on the server"
    )


def _partial_message(decoded: Decoded, result: store.IngestResult, cap: int) -> str:
    parts = []
    if decoded.bad_ids:
        parts.append(
            f"{decoded.bad_ids} span(s) have an invalid id (a trace id is 16 bytes, a span "
            "id 8, not all zero; in JSON, hex text)"
        )
    if decoded.bad_times:
        parts.append(f"{decoded.bad_times} span(s) have a start or end time out of range")
    if decoded.bad_codes:
        parts.append(
            f"{decoded.bad_codes} span(s) have a kind or status code out of range (OTLP's "
            "kinds are 0 to 5, its status codes 0 to 2)"
        )
    if result.refused:
        sessions = ", ".join(result.refused_sessions[:5])
        parts.append(
            f"{result.refused} span(s) refused: their session reached otel.max_session_bytes "
            f"({cap} bytes) and is marked truncated ({sessions})"
        )
    return "; ".join(parts)


async def otel_traces(call: Call) -> Response:
    encoding = request_encoding(call.request)
    agent_id = await _target_agent(call)
    if encoding is None:
        given = call.request.headers.get("content-type") or "none"
        raise CollectorRefusal(
            415,
            "unsupported-media-type",
            f"Content-Type {given!r} is not an OTLP encoding; send application/x-protobuf "
            "or application/json",
        )
    decompressor = _decompressor(call.request)
    settings = call.settings.otel
    state = collector(call)
    try:
        await asyncio.wait_for(state.slots.acquire(), timeout=SLOT_WAIT_SECONDS)
    except TimeoutError:
        raise CollectorRefusal(
            429,
            "collector-busy",
            "every ingest slot of this server is busy; retry after the delay",
            retry_after=RETRY_AFTER_BUSY,
        ) from None
    try:
        body = await read_capped(call.request, settings.max_batch_bytes, decompressor)
        try:
            decoded = decode_protobuf(body) if encoding == "protobuf" else decode_json(body)
        except NotTraces as exc:
            raise BadRequest(str(exc), code="not-traces") from None
        result = store.IngestResult()
        if decoded.spans:
            received_at = datetime.now(UTC)
            try:
                await state.ensure_day(call.db, received_at.date())
                result = await _store(call, state, agent_id, decoded, received_at)
            except DatabaseError:
                state.days.clear()  # a missing partition is created on the next batch
                raise
    finally:
        state.slots.release()
    rejected = decoded.refused + result.refused
    return success_response(
        encoding, rejected, _partial_message(decoded, result, settings.max_session_bytes)
    )


async def _store(
    call: Call, state: Collector, agent_id: int, decoded: Decoded, received_at: datetime
) -> store.IngestResult:
    try:
        return await _store_once(call, state, agent_id, decoded, received_at, exact=False)
    except store.OverCap:  # a concurrent batch took a session to the cap: count exactly
        return await _store_once(call, state, agent_id, decoded, received_at, exact=True)


async def _store_once(
    call: Call,
    state: Collector,
    agent_id: int,
    decoded: Decoded,
    received_at: datetime,
    *,
    exact: bool,
) -> store.IngestResult:
    result = await store_batch(
        call.db,
        agent_id,
        decoded.spans,
        session_names=await state.cached_session_names(call.db, agent_id),
        settings=call.settings.otel,
        received_at=received_at,
        exact=exact,
        token_id=call.agent_token_unchecked,
    )
    call.agent_token_unchecked = None  # the batch's transaction checked it
    return result


async def store_batch(
    db: Database,
    agent_id: int,
    spans: list[Incoming],
    *,
    session_names: list[str],
    settings: OtelSettings,
    received_at: datetime,
    exact: bool,
    token_id: int | None,
) -> store.IngestResult:
    """A batch's transaction: the spans COPYed, the settle jobs of the sessions runs wait
    on, then the write-back sent with the COMMIT."""
    async with db.pipelined_transaction() as conn:
        batch = await store.copy_batch(
            conn,
            agent_id,
            spans,
            session_names=session_names,
            max_session_bytes=settings.max_session_bytes,
            received_at=received_at,
            exact=exact,
            token_id=token_id,
        )
        # Only a session a run waits on needs its settle job now: a run that reaches
        # collecting later queues one itself (evalkit.runs.engine.record).
        await defer_settles(conn, agent_id, batch.result.waiting, settings.settle_seconds)
        await batch.write_back(conn, commit=True)
    return batch.result


async def otel_target(call: Call) -> wire.CollectorTarget:
    """The agent an export with these credentials would be stored for, refused exactly as
    the export would be (a bad or revoked token, a token of another agent, no write access,
    no such agent): what ``tracing.register`` asks before the first run, so that a refused
    exporter fails there with the reason instead of dropping every span."""
    agent_id = await _target_agent(call)
    async with call.db.connection() as conn:
        agent = await get_agent_by_id(conn, agent_id)
        names = await collector(call).session_names(conn, agent_id)
    return wire.CollectorTarget(agent=agent.ref, session_names=list(names))


async def otel_not_traces(call: Call) -> Response:
    signal = "metrics" if call.request.url.path.endswith("/metrics") else "logs"
    raise CollectorRefusal(
        404,
        "traces-only",
        f"evalkit's collector takes traces only, not {signal}: point only the traces "
        f"exporter at it (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=<server>/api/otel/v1/traces) "
        f"and send {signal} to another backend",
    )


# --------------------------------------------------------------------------- reads

MAX_LIST = 1000


def _limit(call: Call) -> int:
    text = call.request.query_params.get("limit", "100")
    number = whole_number(text)
    if number is None or not 1 <= number <= MAX_LIST:
        raise BadRequest(f"limit must be a number from 1 to {MAX_LIST}, not {text!r}")
    return number


async def traces_list_all(call: Call) -> list[wire.TraceSession]:
    access.require_read(call.actor)
    limit = _limit(call)
    async with call.db.connection() as conn:
        return await store.list_sessions(conn, None, limit)


async def traces_find(call: Call) -> list[wire.TraceSession]:
    """The sessions with this id (and orphan traces with this trace id) of every agent: what
    `evalkit traces check SESSION_ID` without --agent looks the agent up in. Everyone logged
    in reads every workspace (read-all), so every agent is searched."""
    access.require_read(call.actor)
    session_id = call.param("session")
    async with call.db.connection() as conn:
        found = await store.sessions_by_id(conn, session_id)
    if not found:
        raise NotFound(
            f"no agent has a session {session_id!r} (nor an orphan trace of that id): no span "
            "with that session id reached the collector (check the exporter's endpoint and "
            "token, and that the spans carry the attribute the agent's mapping names); see "
            "`evalkit traces list`",
            code="no-such-session",
        )
    return found


async def _agent(call: Call, conn: Any) -> AgentRow:
    ws = await get_workspace(conn, call.actor, call.param("workspace"))
    return await get_agent(conn, ws.id, call.param("agent"))


async def traces_list(call: Call) -> list[wire.TraceSession]:
    access.require_read(call.actor)
    limit = _limit(call)
    async with call.db.connection() as conn:
        agent = await _agent(call, conn)
        return await store.list_sessions(conn, agent.id, limit)


async def traces_show(call: Call) -> wire.TraceSessionDetail:
    access.require_read(call.actor)
    session_id = call.param("session")
    async with call.db.connection() as conn:
        agent = await _agent(call, conn)
        row = await store.session_row(conn, agent.id, session_id)
        if row is None:  # or an orphan trace, listed by its trace id
            row = await store.orphan_row(conn, agent.id, session_id)
        if row is None:
            raise NotFound(
                f"agent {agent.ref} has no session {session_id!r}; see "
                f"`evalkit traces list --agent {agent.ref}`",
                code="no-such-session",
            )
        spans = await store.spans_for_row(conn, agent.id, row)
    return wire.TraceSessionDetail(session=store.session_from_row(row), spans=spans)


_SESSIONS = "/api/workspaces/{workspace}/agents/{agent}/sessions"

ENDPOINTS = [
    CollectorEndpoint(
        "POST",
        "/api/otel/v1/traces",
        otel_traces,
        "OTLP/HTTP trace export (protobuf or JSON, gzip or not): an agent token, or a user "
        "token with X-Evalkit-Agent: NAME@WORKSPACE (writers of that workspace)",
        tags=["otel"],
        refusals=(413, 415, 429),  # otel.max_batch_bytes; the media type; ingest slots
    ),
    CollectorEndpoint(
        "POST",
        "/api/otel/v1/metrics",
        otel_not_traces,
        "Refused: the collector takes traces only",
        tags=["otel"],
        refusals=(415,),
    ),
    CollectorEndpoint(
        "POST",
        "/api/otel/v1/logs",
        otel_not_traces,
        "Refused: the collector takes traces only",
        tags=["otel"],
        refusals=(415,),
    ),
    Endpoint(
        "POST",
        "/api/otel/check",
        otel_target,
        "The agent spans sent with these credentials are stored for (an agent token, or a "
        "login with X-Evalkit-Agent: NAME@WORKSPACE), refused as the export would be, and "
        "the session attribute names of its active mapping: an exporter's check",
        returns=wire.CollectorTarget,
        tags=["otel"],
        agent_tokens=True,
    ),
    Endpoint(
        "GET",
        "/api/traces",
        traces_list_all,
        "Trace sessions of every agent, and orphan traces (no root span, no session "
        "attribute), most recently active first (?limit=, default 100)",
        returns=list[wire.TraceSession],
        tags=["otel"],
    ),
    Endpoint(
        "GET",
        "/api/traces/{session}",
        traces_find,
        "The trace sessions with this id, of every agent (a session id is unique per agent "
        "only), and the orphan traces with this trace id, by workspace then agent; 404 "
        "when no agent has one",
        returns=list[wire.TraceSession],
        tags=["otel"],
    ),
    Endpoint(
        "GET",
        _SESSIONS,
        traces_list,
        "An agent's trace sessions, and its orphan traces (no root span, no session "
        "attribute), most recently active first (?limit=, default 100)",
        returns=list[wire.TraceSession],
        tags=["otel"],
    ),
    Endpoint(
        "GET",
        _SESSIONS + "/{session}",
        traces_show,
        "One trace session (or orphan trace, by its trace id) with its spans as received, "
        "by start time",
        returns=wire.TraceSessionDetail,
        tags=["otel"],
    ),
]
