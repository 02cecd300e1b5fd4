"""Stored spans, sessions and the span partitions.

:func:`copy_batch`, then its ``write_back``, write one OTLP batch inside the caller's
transaction, in two statements and a COPY (more when a trace was seen before, or a session
nears its size cap):

1. ``trace_claim_many`` creates or locks the batch's traces: a trace whose session is known
   keeps it; a trace whose root span is in the batch takes the root's session (its spans
   that came earlier, counted as pending, move to it); any other trace stays pending until
   its root comes. It also says which of the sessions a run waits on;
2. a span can already be stored only in a trace an earlier batch created (a retried export,
   or a span sent again): ``span_find_stored`` looks those up, once the traces are locked,
   and they are not stored again (nor a span twice in one batch);
3. sessions the batch could take over ``max_session_bytes`` are locked
   (``session_lock_many``); spans that would take their session (or pending trace) over
   the cap are refused; the rest are COPYed (binary) into ``spans``;
4. ``trace_session_write_many`` writes the changed traces and the sessions back, and fails
   (:class:`OverCap`) when a session the batch did not lock went over the cap meanwhile.
   The edge queues its settle jobs before it, and sends it with the COMMIT.

Locks are taken the agent first (held, FOR KEY SHARE, by ``trace_claim_many``: its delete
waits for the batch), then traces, then sessions, each in key order, so concurrent batches
never deadlock. A batch that carries a span of a trace waits for any other batch that holds the
trace's lock, so the second of two copies of a span in flight at once sees the first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import msgspec
import psycopg
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from psycopg.types.string import BytesBinaryDumper

from evalkit.db import Conn, IntegrityError
from evalkit.errors import Conflict, DatabaseError
from evalkit.model import otel as wire
from evalkit.otel.model import Span, orphan_session_id, session_attribute_names, session_text
from evalkit.otel.otlp import (
    Incoming,
    TraceGroup,
    any_value,
    group_by_trace,
    native,
    span_from_row,
)
from evalkit.sql import queries
from evalkit.store.agents import active_mapping

DEFAULT_SESSION_ATTRIBUTES = ["session.id", "gen_ai.conversation.id"]
"""Where the session id is looked up for an agent whose active mapping names none."""

_COPY_TYPES = [
    "timestamptz",
    "int8",
    "bytea",
    "bytea",
    "bytea",
    "text",
    "int2",
    "int8",
    "int8",
    "int2",
    "text",
    "text",
    "bytea",
    "bytea",
    "int4",
]


def ns_to_datetime(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, UTC)


# --------------------------------------------------------------------------- partitions


async def ensure_partition(conn: Conn, day: date) -> bool:
    """Create the spans partition of ``day`` (UTC) if missing; True when created."""
    row = await conn.one("span_partition_create", day=day)
    return bool(row and row["created"])


async def ensure_partitions_ahead(conn: Conn, today: date, days_ahead: int) -> list[date]:
    created = []
    for offset in range(days_ahead + 1):
        day = today + timedelta(days=offset)
        if await ensure_partition(conn, day):
            created.append(day)
    return created


async def drop_old_partitions(conn: Conn, today: date, retention_days: int) -> list[str]:
    """Drop partitions of days before ``today - retention_days`` and forget the traces and
    sessions that only they referred to."""
    cutoff_day = today - timedelta(days=retention_days)
    cutoff = datetime(cutoff_day.year, cutoff_day.month, cutoff_day.day, tzinfo=UTC)
    dropped = [
        row["dropped"] for row in await conn.all("span_partition_drop_before", cutoff=cutoff_day)
    ]
    await conn.execute("trace_session_delete_before", cutoff=cutoff)
    await conn.execute("session_delete_before", cutoff=cutoff)
    return dropped


# --------------------------------------------------------------------------- ingest


@dataclass
class IngestResult:
    stored: int = 0
    duplicates: int = 0
    refused: int = 0
    """Spans refused because their session (or pending trace) reached the size cap."""
    refused_sessions: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    """Sessions that changed."""
    waiting: list[str] = field(default_factory=list)
    """Sessions among them that a run of the agent waits on: each gets a settle job."""


def session_of_span(span: Incoming, names: list[str]) -> str | None:
    """The session id a span carries: the first of ``names`` found with a value, in the
    span's attributes, then its resource's (as :func:`evalkit.otel.model.session_id_of`,
    reading only the attributes named)."""
    wanted = _span_attributes(span.body, names)
    for name in names:
        for value in (wanted.get(name), span.resource.get(name)):
            if value not in (None, ""):
                return session_text(value)
    return None


def _span_attributes(body: bytes, names: list[str]) -> dict[str, Any]:
    """The values of the span's attributes named in ``names`` (the last of a name)."""
    found = native.attributes(body, names) if native is not None else None
    if found is not None:
        return {name: any_value(AnyValue.FromString(raw)) for name, raw in found.items()}
    wanted = {}
    for kv in ProtoSpan.FromString(body).attributes:
        if kv.key in names:
            wanted[kv.key] = any_value(kv.value)
    return wanted


def _claim(group: TraceGroup, names: list[str]) -> dict[str, Any]:
    """The trace's row of the claim (``trace_claim_many``)."""
    return {
        "trace_id": group.trace_id.hex(),
        "session_id": _root_session(group, names),
        "first_span_at": ns_to_datetime(group.first_ns),
        "last_span_at": ns_to_datetime(group.last_ns),
    }


def _root_session(group: TraceGroup, names: list[str]) -> str | None:
    """The session a trace takes when its root span is in the batch: the root's session
    attribute, else the first one found on the trace's other spans here, else the trace id.
    None when the root is not here."""
    if group.root is None:
        return None
    found = session_of_span(group.root, names)
    if found is not None:
        return found
    for span in sorted(group.spans, key=lambda s: (s.start_ns, s.span_id)):
        found = session_of_span(span, names)
        if found is not None:
            return found
    return group.trace_id.hex()


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(slots=True, eq=False)  # a bucket is itself: a key by identity
class _Bucket:
    """A session, or a trace still waiting for its root: what it holds and what it gains."""

    bytes: int
    spans: int = 0
    added_bytes: int = 0
    rejected: int = 0
    truncated: bool = False
    changed: bool = False
    """The batch brings it a span (stored or refused), or a trace's held spans."""
    first: datetime | None = None
    last: datetime | None = None

    def add_times(self, first: datetime | None, last: datetime | None) -> None:
        self.first = _earliest(self.first, first)
        self.last = _latest(self.last, last)


_json = msgspec.json.Encoder()


class OverCap(Exception):
    """A session of the batch went over the size cap under a concurrent batch while this one
    counted on it not to: roll the transaction back and ingest again with ``exact=True``."""


OVER_CAP_CONSTRAINT = "sessions_size_cap"
"""What the write-back's refusal of a session a concurrent batch took over the cap names."""


@dataclass
class CopiedBatch:
    """A batch whose spans are COPYed, and whose traces and sessions are not yet written back:
    the caller may add to the transaction (a run waits on a session: its settle job) first."""

    agent_id: int
    received_at: datetime
    max_session_bytes: int
    result: IngestResult
    traces: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)
    """The sessions locked before the COPY, counted exactly (the others may raise OverCap)."""

    async def write_back(self, conn: Conn, *, commit: bool = False) -> None:
        """Write the traces and sessions back. With ``commit``, as the last statement of the
        caller's :meth:`evalkit.db.Database.pipelined_transaction`, sent with its COMMIT:
        one round trip. :class:`OverCap` when a session not locked is now over the cap."""
        if not self.sessions and not self.traces:
            return
        params = {
            "agent_id": self.agent_id,
            "received_at": self.received_at,
            "max_session_bytes": self.max_session_bytes,
            "locked": self.locked,
            "traces": _json.encode(self.traces).decode(),
            "sessions": _json.encode(self.sessions).decode(),
        }
        try:
            if commit:
                await conn.one_and_commit("trace_session_write_many", **params)
            else:
                await conn.one("trace_session_write_many", **params)
        except IntegrityError as exc:
            if exc.constraint == OVER_CAP_CONSTRAINT:
                raise OverCap(str(exc)) from exc
            raise


async def copy_batch(
    conn: Conn,
    agent_id: int,
    spans: list[Incoming],
    *,
    session_names: list[str],
    max_session_bytes: int,
    received_at: datetime,
    exact: bool = False,
    token_id: int | None = None,
) -> CopiedBatch:
    """Store a batch's spans; call inside a transaction (see the module docstring), then
    write the traces and sessions back (``write_back``) in the same one.

    ``token_id``, an agent token the caller has not checked, is checked by the statement
    that holds the agent: when it was revoked nothing is stored, and the agent reads as
    deleted (the caller then learns which from the token).

    A session whose size, as last committed, plus everything the batch could add stays
    within the cap is not locked before the spans are stored: its row is written once, by
    the write-back, and its lock held only until the commit. Should a concurrent batch have
    taken it over the cap meanwhile, the write-back raises :class:`OverCap`: roll back and
    call again with ``exact=True``, which locks every session of the batch first."""
    result = IngestResult()
    batch = CopiedBatch(agent_id, received_at, max_session_bytes, result)
    if not spans:
        return batch
    groups, twice = group_by_trace(spans)
    group_of = {group.trace_id: group for group in groups}

    # 1. create or lock the traces. A trace's times are those of all its spans here (a span
    # refused by the cap below still widens them).
    rows = await conn.all(
        "trace_claim_many",
        agent_id=agent_id,
        token_id=token_id,
        received_at=received_at,
        traces=_json.encode([_claim(group, session_names) for group in groups]).decode(),
    )
    if not rows:  # every trace of the batch has a row, unless the agent (or token) is gone
        raise _agent_deleted(agent_id)

    # 2. the spans stored already, in traces an earlier batch created; a span twice in this
    # batch is stored once
    seen = await _stored_spans(
        conn, agent_id, [group_of[r["trace_id"]].spans for r in rows if r["earlier"]]
    )

    # 3. what each trace's spans count against. Sessions the batch could take over the cap
    # are locked, to count exactly.
    reach = _session_reach(rows, group_of)
    lock = sorted(reach) if exact else sorted(s for s, n in reach.items() if n > max_session_bytes)
    locked = await _lock_sessions(conn, agent_id, lock)
    buckets = _Buckets.of(rows, locked, max_session_bytes)

    # 4. the size cap: a span that would take its session (or pending trace) over it is
    # refused (an unlocked session cannot reach it here)
    refused: list[Incoming] = []
    times: Mapping[bytes, Sequence[int]]
    if not seen and not twice and _all_fit(groups, buckets.of_trace, max_session_bytes):
        _take_all(groups, buckets.of_trace)
        accepted = spans
        times = {group.trace_id: (group.first_ns, group.last_ns) for group in groups}
    else:
        accepted, refused, times = _take_each(spans, seen, buckets.of_trace, max_session_bytes)
        result.duplicates = len(spans) - len(accepted) - len(refused)
    if accepted:
        await _copy_spans(conn, agent_id, accepted, received_at)

    # 5. what the write-back writes: the traces whose session or pending counts changed, and
    # the sessions the batch brought something to
    buckets.add_span_times(rows, times)
    batch.traces = buckets.trace_rows(rows)
    batch.sessions = buckets.session_rows()
    batch.locked = sorted(locked)
    result.waiting = sorted({row["session_id"] for row in rows if row["waiting"]})
    result.stored = len(accepted)
    result.refused = len(refused)
    result.refused_sessions = buckets.refused_sessions()
    result.touched = [session_id for session_id, _ in buckets.changed_sessions()]
    return batch


def _session_reach(
    rows: list[dict[str, Any]], group_of: Mapping[bytes, TraceGroup]
) -> dict[str, int]:
    """The size each session of the claimed traces would reach with all of the batch's spans
    (and a trace's held spans, when its root came now), from its size as last committed."""
    reach: dict[str, int] = {}
    for row in rows:
        session_id = row["session_id"]
        if session_id is not None:
            reach[session_id] = (
                reach.get(session_id, row["session_bytes"] or 0)
                + group_of[row["trace_id"]].size
                + (row["pending_bytes"] if row["root_now"] else 0)
            )
    return reach


async def _lock_sessions(conn: Conn, agent_id: int, session_ids: list[str]) -> dict[str, int]:
    """Lock these sessions (in key order) and read their sizes."""
    if not session_ids:
        return {}
    rows = await conn.all(
        "session_lock_many", agent_id=agent_id, session_ids=_json.encode(session_ids).decode()
    )
    return {row["session_id"]: row["bytes"] for row in rows}


@dataclass(slots=True)
class _Buckets:
    """What the claimed traces' spans count against: their sessions, and the traces still
    waiting for their root."""

    sessions: dict[str, _Bucket] = field(default_factory=dict)
    pending: dict[bytes, _Bucket] = field(default_factory=dict)
    of_trace: dict[bytes, _Bucket] = field(default_factory=dict)

    @classmethod
    def of(
        cls, rows: list[dict[str, Any]], locked: Mapping[str, int], max_session_bytes: int
    ) -> _Buckets:
        """The buckets of the claim's rows: a trace waiting for its root is its own bucket;
        the traces of a session share the session's, sized as locked, else as last
        committed. A trace whose root came now brings its held spans to its session."""
        buckets = cls()
        for row in rows:
            trace_id = row["trace_id"]
            session_id = row["session_id"]
            if session_id is None:
                bucket = buckets.pending[trace_id] = _Bucket(
                    bytes=row["pending_bytes"],
                    spans=row["pending_spans"],
                    first=row["first_span_at"],
                    last=row["last_span_at"],
                )
            else:
                bucket = buckets.sessions.get(session_id)  # type: ignore[assignment]
                if bucket is None:
                    bucket = buckets.sessions[session_id] = _Bucket(
                        bytes=locked.get(session_id, row["session_bytes"] or 0)
                    )
                if row["root_now"]:
                    moved = row["pending_bytes"]
                    bucket.bytes += moved
                    bucket.added_bytes += moved
                    bucket.spans += row["pending_spans"]
                    bucket.changed = True
                    bucket.add_times(row["first_span_at"], row["last_span_at"])
                    if moved and bucket.bytes > max_session_bytes:
                        bucket.truncated = True
            buckets.of_trace[trace_id] = bucket
        return buckets

    def add_span_times(
        self, rows: list[dict[str, Any]], times: Mapping[bytes, Sequence[int]]
    ) -> None:
        """Widen each session's times by those of its traces' spans taken (a pending trace's
        times are the claim's, already final)."""
        for row in rows:
            span_times = times.get(row["trace_id"])
            if span_times is not None and row["session_id"] is not None:
                self.of_trace[row["trace_id"]].add_times(
                    ns_to_datetime(span_times[0]), ns_to_datetime(span_times[1])
                )

    def refused_sessions(self) -> list[str]:
        """The sessions a span was refused from, and a word for the pending traces if one
        was refused from them."""
        refused = sorted(s for s, bucket in self.sessions.items() if bucket.rejected)
        if any(bucket.rejected for bucket in self.pending.values()):
            refused.append("(traces whose root span has not arrived)")
        return refused

    def trace_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The write-back's traces: those still pending (their counts) and those whose root
        came now (their session)."""
        traces = []
        for row in rows:
            held = self.pending.get(row["trace_id"])
            if held is not None or row["root_now"]:
                traces.append(
                    {
                        "trace_id": row["trace_id"].hex(),
                        "session_id": row["session_id"],
                        "pending_spans": held.spans if held else 0,
                        "pending_bytes": held.bytes if held else 0,
                    }
                )
        return traces

    def changed_sessions(self) -> list[tuple[str, _Bucket]]:
        """The sessions the batch brought something to, in key order."""
        return [(s, bucket) for s, bucket in sorted(self.sessions.items()) if bucket.changed]

    def session_rows(self) -> list[dict[str, Any]]:
        """The write-back's sessions (:meth:`changed_sessions`)."""
        return [
            {
                "session_id": session_id,
                "spans": bucket.spans,
                "bytes": bucket.added_bytes,
                "rejected": bucket.rejected,
                "truncated": bucket.truncated,
                "first_span_at": bucket.first,
                "last_span_at": bucket.last,
            }
            for session_id, bucket in self.changed_sessions()
        ]


def _all_fit(
    groups: list[TraceGroup], bucket_of: dict[bytes, _Bucket], max_session_bytes: int
) -> bool:
    """Whether every session (or pending trace) stays within the cap with all of the batch's
    spans."""
    reach: dict[_Bucket, int] = {}
    for group in groups:
        bucket = bucket_of[group.trace_id]
        reach[bucket] = reach.get(bucket, bucket.bytes) + group.size
        if reach[bucket] > max_session_bytes:
            return False
    return True


def _take_all(groups: list[TraceGroup], bucket_of: dict[bytes, _Bucket]) -> None:
    """Count every span of the batch, a trace at a time (what :func:`_take_each` does span
    by span, when no span is stored already or comes twice, and :func:`_all_fit`)."""
    for group in groups:
        bucket = bucket_of[group.trace_id]
        bucket.changed = True
        bucket.bytes += group.size
        bucket.added_bytes += group.size
        bucket.spans += len(group.spans)


def _take_each(
    spans: list[Incoming], seen: set[bytes], bucket_of: dict[bytes, _Bucket], max_session_bytes: int
) -> tuple[list[Incoming], list[Incoming], dict[bytes, list[int]]]:
    """Count the spans one by one, in order: a span stored already (in ``seen``) or sent
    twice is skipped; one that would take its session (or pending trace) over the cap is
    refused. The spans taken, those refused, and each trace's times over the spans taken."""
    accepted: list[Incoming] = []
    refused: list[Incoming] = []
    times: dict[bytes, list[int]] = {}
    for span in spans:
        trace_id = span.trace_id
        key = trace_id + span.span_id
        if key in seen:
            continue
        seen.add(key)
        bucket = bucket_of[trace_id]
        bucket.changed = True
        size = span.size
        if bucket.bytes + size > max_session_bytes:
            bucket.rejected += 1
            bucket.truncated = True
            refused.append(span)
            continue
        bucket.bytes += size
        bucket.added_bytes += size
        bucket.spans += 1
        span_times = times.get(trace_id)
        if span_times is None:
            times[trace_id] = [span.start_ns, span.end_ns]
        else:
            if span.start_ns < span_times[0]:
                span_times[0] = span.start_ns
            if span.end_ns > span_times[1]:
                span_times[1] = span.end_ns
        accepted.append(span)
    return accepted, refused, times


def _agent_deleted(agent_id: int) -> Conflict:
    return Conflict(
        f"agent {agent_id} was deleted while this batch was being stored; none of its spans "
        "were kept (an exporter of a deleted agent should be stopped, or pointed at another "
        "agent with a token of its own)",
        code="agent-deleted",
    )


async def _stored_spans(conn: Conn, agent_id: int, groups: list[list[Incoming]]) -> set[bytes]:
    """Which of these spans (of traces an earlier batch created) are stored: their trace id
    and span id, concatenated."""
    if not groups:
        return set()
    spans = [s for group in groups for s in group]
    rows = await conn.all(
        "span_find_stored",
        agent_id=agent_id,
        trace_ids=b"".join(s.trace_id for s in spans),
        span_ids=b"".join(s.span_id for s in spans),
    )
    stored: set[bytes] = set()
    for row in rows:
        trace_id, ids = row["trace_id"], row["span_ids"]
        stored.update(trace_id + ids[i : i + 8] for i in range(0, len(ids), 8))
    return stored


async def _copy_spans(
    conn: Conn, agent_id: int, spans: list[Incoming], received_at: datetime
) -> None:
    try:
        async with conn.raw.cursor() as cur, cur.copy(queries["span_copy"]) as copy:
            if native is not None:
                micros = (received_at - _POSTGRES_EPOCH) // timedelta(microseconds=1)
                await copy.write(native.copy_rows(spans, micros, agent_id))
            else:
                await _write_rows(cur, copy, agent_id, spans, received_at)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"the database did not answer ({exc}); is it running?") from exc
    except psycopg.Error as exc:
        raise DatabaseError(f"span_copy failed: {exc}") from exc


_POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
"""Where a binary ``timestamptz`` counts its microseconds from."""


async def _write_rows(
    cur: Any, copy: Any, agent_id: int, spans: list[Incoming], received_at: datetime
) -> None:
    """The rows :func:`evalkit.otel._native.copy_rows` makes, made by psycopg (when evalkit
    was built without a C compiler)."""
    # psycopg's dumper for the bytea oid is the DB-API Binary wrapper's, written in
    # Python; the plain bytes dumper (in C) is several times faster on five columns.
    cur.adapters.register_dumper(bytes, BytesBinaryDumper)
    copy.set_types(_COPY_TYPES)
    # The rows are formatted in C and sent a buffer at a time: awaiting
    # Copy.write_row for each of 512 rows cost more than formatting them.
    format_row, send = copy.formatter.write_row, copy.writer.write
    for span in spans:
        data = format_row(copy_row(span, agent_id, received_at))
        if data:
            await send(data)


def copy_row(span: Incoming, agent_id: int, received_at: datetime) -> tuple[Any, ...]:
    """The span's row of the ``span_copy`` statement, for psycopg to format (of the types
    ``_COPY_TYPES``)."""
    return (
        received_at,
        agent_id,
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        span.name,
        span.kind,
        span.start_ns,
        span.end_ns,
        span.status_code,
        span.status_message,
        span.scope,
        span.body,
        span.resource_body,
        span.size,
    )


# --------------------------------------------------------------------------- orphans


async def session_names(conn: Conn, agent_id: int) -> list[str]:
    """The attribute names the agent's active mapping reads the session id from (the
    defaults when it has no mapping, or one that names none)."""
    mapping = await active_mapping(conn, agent_id)
    names = session_attribute_names(mapping[1]) if mapping else []
    return names or list(DEFAULT_SESSION_ATTRIBUTES)


async def traces_waiting_root(conn: Conn, before: datetime, limit: int) -> list[tuple[int, bytes]]:
    """(agent id, trace id) of traces still without their root span, quiet since ``before``
    and not looked at since their last span: oldest first."""
    rows = await conn.all("trace_session_list_waiting_root", before=before, limit=limit)
    return [(row["agent_id"], row["trace_id"]) for row in rows]


@dataclass
class OrphanOutcome:
    session_id: str | None
    """The session the trace joined, or None: it is an orphan now."""
    waiting: bool = False
    """A run of the agent waits on that session (it needs its settle job)."""


async def settle_orphan(
    conn: Conn,
    agent_id: int,
    trace_id: bytes,
    *,
    names: list[str],
    before: datetime,
    max_session_bytes: int,
) -> OrphanOutcome | None:
    """Give a trace whose root span never came (quiet since ``before``) the session one of
    its spans names, or mark it orphan; call inside a transaction. None when the trace has
    its root, or a new span, since it was listed, or its agent was deleted."""
    if await conn.one("agent_hold", agent_id=agent_id) is None:
        return None  # the agent was deleted, and its traces with it
    row = await conn.one(
        "trace_session_lock_waiting_root", agent_id=agent_id, trace_id=trace_id, before=before
    )
    if row is None:
        return None
    spans = await spans_for_trace(conn, agent_id, trace_id)
    session_id = orphan_session_id(spans, names)
    if session_id is None:
        await conn.execute("trace_session_mark_orphan", agent_id=agent_id, trace_id=trace_id)
        return OrphanOutcome(None)
    answer = await conn.one(
        "trace_session_assign_orphan",
        agent_id=agent_id,
        trace_id=trace_id,
        session_id=session_id,
        spans=row["pending_spans"],
        bytes=row["pending_bytes"],
        max_session_bytes=max_session_bytes,
        first_span_at=row["first_span_at"],
        last_span_at=row["last_span_at"],
        first_received_at=row["first_received_at"] or row["last_received_at"],
        last_received_at=row["last_received_at"],
    )
    return OrphanOutcome(session_id, waiting=bool(answer and answer["waiting"]))


def _trace_id(text: str) -> bytes | None:
    """A trace id given as 32 hex digits, or None."""
    if len(text) != 32:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


async def orphan_row(conn: Conn, agent_id: int, session_id: str) -> dict[str, Any] | None:
    """The orphan trace whose id (hex) is ``session_id``, as a session row, or None."""
    trace_id = _trace_id(session_id)
    if trace_id is None:
        return None
    return await conn.one("trace_session_get_orphan", agent_id=agent_id, trace_id=trace_id)


# --------------------------------------------------------------------------- reading


async def spans_for_session(conn: Conn, agent_id: int, session_id: str) -> list[Span]:
    """Every stored span of a session, by start time then span id, as received."""
    rows = await conn.all("span_list_for_session", agent_id=agent_id, session_id=session_id)
    resources: dict[bytes, dict[str, Any]] = {}
    return [span_from_row(row, resources) for row in rows]


async def spans_for_trace(conn: Conn, agent_id: int, trace_id: bytes) -> list[Span]:
    """Every stored span of one trace, by start time then span id, as received."""
    rows = await conn.all("span_list_for_trace", agent_id=agent_id, trace_id=trace_id)
    resources: dict[bytes, dict[str, Any]] = {}
    return [span_from_row(row, resources) for row in rows]


async def spans_for_row(conn: Conn, agent_id: int, row: dict[str, Any]) -> list[Span]:
    """The spans of what :func:`session_row` or :func:`orphan_row` returned."""
    if row.get("unassigned"):
        return await spans_for_trace(conn, agent_id, bytes.fromhex(row["session_id"]))
    return await spans_for_session(conn, agent_id, row["session_id"])


async def session_row(conn: Conn, agent_id: int, session_id: str) -> dict[str, Any] | None:
    """The session's row (``sessions`` columns plus ``agent`` and ``workspace``), or None."""
    return await conn.one("session_get", agent_id=agent_id, session_id=session_id)


def session_from_row(row: dict[str, Any]) -> wire.TraceSession:
    return wire.TraceSession(
        agent=row["agent"],
        workspace=row["workspace"],
        session_id=row["session_id"],
        run_id=row["run_id"],
        span_count=row["span_count"],
        bytes=row["bytes"],
        rejected_spans=row["rejected_spans"],
        truncated=row["truncated"],
        first_span_at=row["first_span_at"],
        last_span_at=row["last_span_at"],
        first_received_at=row["first_received_at"],
        last_received_at=row["last_received_at"],
        unassigned=row.get("unassigned", False),
    )


async def sessions_by_id(conn: Conn, session_id: str) -> list[wire.TraceSession]:
    """Every agent's session whose id is ``session_id``, and every orphan trace whose trace
    id (hex) it is, by workspace then agent: a session id is unique per agent only."""
    rows = await conn.all(
        "session_list_by_id", session_id=session_id, trace_id=_trace_id(session_id)
    )
    return [session_from_row(row) for row in rows]


async def list_sessions(conn: Conn, agent_id: int | None, limit: int) -> list[wire.TraceSession]:
    rows = await conn.all("session_list", agent_id=agent_id, limit=limit)
    return [session_from_row(row) for row in rows]
