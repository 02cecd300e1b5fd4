"""Stored spans, sessions and the span partitions.

:func:`ingest` writes one OTLP batch inside the caller's transaction:

1. every trace of the batch gets its ``trace_sessions`` row, locked in key order;
2. a trace whose session is known keeps it; a trace whose root span is in the batch takes
   the root's session (its spans that came earlier, counted as pending, move to it); any
   other trace stays pending until its root comes;
3. the sessions touched are locked in key order, so concurrent batches never deadlock;
4. the spans' keys go into ``span_keys`` (ON CONFLICT DO NOTHING): a key that already
   exists is a retried export, and that span is not stored again;
5. new spans that would take their session (or pending trace) over the size cap are
   refused and their keys given back; the rest are COPYed (binary) into ``spans``;
6. traces and sessions are written back with one statement each.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from evalkit.db import Conn
from evalkit.errors import DatabaseError
from evalkit.model import otel as wire
from evalkit.otel.model import Span, session_id_of
from evalkit.otel.otlp import Incoming, span_from_row
from evalkit.sql import queries

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


async def list_partitions(conn: Conn) -> list[str]:
    return [row["name"] for row in await conn.all("span_partition_list")]


async def drop_old_partitions(conn: Conn, today: date, retention_days: int) -> list[str]:
    """Drop partitions of days before ``today - retention_days`` and forget the keys, traces
    and sessions that only they referred to."""
    cutoff_day = today - timedelta(days=retention_days)
    cutoff = datetime(cutoff_day.year, cutoff_day.month, cutoff_day.day, tzinfo=UTC)
    dropped = [
        row["dropped"] for row in await conn.all("span_partition_drop_before", cutoff=cutoff_day)
    ]
    await conn.execute("span_key_delete_before", cutoff=cutoff)
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


def _root_session(spans: list[Incoming], names: list[str], trace_id: bytes) -> str | None:
    """The session a trace takes when its root span is among ``spans``: the root's session
    attribute, else the first one found on the trace's other spans here, else the trace id.
    None when the root is not here."""
    roots = [s for s in spans if s.parent_span_id is None]
    if not roots:
        return None
    root = min(roots, key=lambda s: (s.start_ns, s.span_id))
    found = session_id_of(root.lookup(), names)
    if found is not None:
        return found
    for span in sorted(spans, key=lambda s: (s.start_ns, s.span_id)):
        found = session_id_of(span.lookup(), names)
        if found is not None:
            return found
    return trace_id.hex()


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class _Bucket:
    """A session, or a trace still waiting for its root: what it holds and what it gains."""

    bytes: int
    spans: int = 0
    added_bytes: int = 0
    rejected: int = 0
    truncated: bool = False
    first: datetime | None = None
    last: datetime | None = None

    def add_times(self, first: datetime | None, last: datetime | None) -> None:
        self.first = _earliest(self.first, first)
        self.last = _latest(self.last, last)


async def ingest(
    conn: Conn,
    agent_id: int,
    spans: list[Incoming],
    *,
    session_names: list[str],
    max_session_bytes: int,
    received_at: datetime,
) -> IngestResult:
    """Store a batch; call inside a transaction (see the module docstring)."""
    result = IngestResult()
    if not spans:
        return result
    by_trace: dict[bytes, list[Incoming]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    trace_ids = sorted(by_trace)

    # 1-2. traces and their sessions
    packed = b"".join(trace_ids)
    trace_rows = {
        row["trace_id"]: row
        for row in await conn.all("trace_session_lock_many", agent_id=agent_id, trace_ids=packed)
    }
    session_of: dict[bytes, str] = {}
    resolved_now: set[bytes] = set()
    for trace_id in trace_ids:
        known = trace_rows[trace_id]["session_id"]
        if known is not None:
            session_of[trace_id] = known
            continue
        found = _root_session(by_trace[trace_id], session_names, trace_id)
        if found is not None:
            session_of[trace_id] = found
            resolved_now.add(trace_id)

    # 3. sessions
    session_ids = sorted(set(session_of.values()))
    sessions: dict[str, _Bucket] = {}
    if session_ids:
        for row in await conn.all("session_lock_many", agent_id=agent_id, session_ids=session_ids):
            sessions[row["session_id"]] = _Bucket(bytes=int(row["bytes"]))
    pending: dict[bytes, _Bucket] = {}
    for trace_id in trace_ids:
        row = trace_rows[trace_id]
        if trace_id in resolved_now:
            bucket = sessions[session_of[trace_id]]
            moved = int(row["pending_bytes"])
            bucket.bytes += moved
            bucket.added_bytes += moved
            bucket.spans += int(row["pending_spans"])
            bucket.add_times(row["first_span_at"], row["last_span_at"])
            if moved and bucket.bytes > max_session_bytes:
                bucket.truncated = True
        elif trace_id not in session_of:
            pending[trace_id] = _Bucket(
                bytes=int(row["pending_bytes"]),
                spans=int(row["pending_spans"]),
                first=row["first_span_at"],
                last=row["last_span_at"],
            )

    # 4. dedupe on (trace id, span id)
    claimed = await conn.one(
        "span_key_insert_many",
        agent_id=agent_id,
        trace_ids=b"".join(s.trace_id for s in spans),
        span_ids=b"".join(s.span_id for s in spans),
        received_at=received_at,
    )
    keys = {(s.trace_id, s.span_id) for s in spans}
    if claimed is None or claimed["claimed"] < len(keys):  # a retry: find what is new
        keys = {
            (row["trace_id"], row["span_id"])
            for row in await conn.all(
                "span_key_list_claimed",
                agent_id=agent_id,
                received_at=received_at,
                trace_ids=packed,
            )
        }
    new_keys = keys

    # 5. the size cap
    accepted: list[Incoming] = []
    refused: list[Incoming] = []
    trace_first: dict[bytes, datetime] = {}
    trace_last: dict[bytes, datetime] = {}
    for span in spans:
        key = (span.trace_id, span.span_id)
        if key not in new_keys:
            result.duplicates += 1
            continue
        new_keys.discard(key)  # a span twice in one batch is stored once
        session = session_of.get(span.trace_id)
        bucket = sessions[session] if session is not None else pending[span.trace_id]
        size = span.size
        if bucket.bytes + size > max_session_bytes:
            bucket.rejected += 1
            bucket.truncated = True
            refused.append(span)
            continue
        bucket.bytes += size
        bucket.added_bytes += size
        bucket.spans += 1
        first, last = ns_to_datetime(span.start_ns), ns_to_datetime(span.end_ns)
        bucket.add_times(first, last)
        trace_first[span.trace_id] = _earliest(trace_first.get(span.trace_id), first)  # type: ignore[assignment]
        trace_last[span.trace_id] = _latest(trace_last.get(span.trace_id), last)  # type: ignore[assignment]
        accepted.append(span)
    if refused:
        await conn.execute(
            "span_key_delete_many",
            agent_id=agent_id,
            trace_ids=b"".join(s.trace_id for s in refused),
            span_ids=b"".join(s.span_id for s in refused),
        )
    if accepted:
        await _copy_spans(conn, agent_id, accepted, received_at)

    # 6. write back, and learn which sessions a run waits on
    update: dict[str, list[Any]] = defaultdict(list)
    for trace_id in trace_ids:
        row = trace_rows[trace_id]
        held = pending.get(trace_id)
        update["t_session_ids"].append(session_of.get(trace_id))
        update["t_pending_spans"].append(held.spans if held else 0)
        update["t_pending_bytes"].append(held.bytes if held else 0)
        update["t_first_span_at"].append(_earliest(row["first_span_at"], trace_first.get(trace_id)))
        update["t_last_span_at"].append(_latest(row["last_span_at"], trace_last.get(trace_id)))
    for session_id, bucket in sessions.items():
        update["session_ids"].append(session_id)
        update["spans"].append(bucket.spans)
        update["bytes"].append(bucket.added_bytes)
        update["rejected"].append(bucket.rejected)
        update["truncated"].append(bucket.truncated)
        update["first_span_at"].append(bucket.first)
        update["last_span_at"].append(bucket.last)
    for key in ("session_ids", "spans", "bytes", "rejected", "truncated"):
        update.setdefault(key, [])
    update.setdefault("first_span_at", [])
    update.setdefault("last_span_at", [])
    waiting = await conn.all(
        "session_update_batch",
        agent_id=agent_id,
        received_at=received_at,
        trace_ids=packed,
        **update,
    )
    result.waiting = sorted(row["session_id"] for row in waiting)
    result.stored = len(accepted)
    result.refused = len(refused)
    result.refused_sessions = sorted(s for s, b in sessions.items() if b.rejected)
    result.touched = sorted(sessions)
    if any(b.rejected for b in pending.values()):
        result.refused_sessions.append("(traces whose root span has not arrived)")
    return result


async def _copy_spans(
    conn: Conn, agent_id: int, spans: list[Incoming], received_at: datetime
) -> None:
    try:
        async with conn.raw.cursor() as cur, cur.copy(queries["span_copy"]) as copy:
            copy.set_types(_COPY_TYPES)
            for s in spans:
                await copy.write_row(
                    (
                        received_at,
                        agent_id,
                        s.trace_id,
                        s.span_id,
                        s.parent_span_id,
                        s.name,
                        s.kind,
                        s.start_ns,
                        s.end_ns,
                        s.status_code,
                        s.status_message,
                        s.scope,
                        s.body,
                        s.resource_body,
                        s.size,
                    )
                )
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"the database did not answer ({exc}); is it running?") from exc
    except psycopg.Error as exc:
        raise DatabaseError(f"span_copy failed: {exc}") from exc


# --------------------------------------------------------------------------- reading


async def spans_for_session(conn: Conn, agent_id: int, session_id: str) -> list[Span]:
    """Every stored span of a session, by start time then span id, as received."""
    rows = await conn.all("span_list_for_session", agent_id=agent_id, session_id=session_id)
    resources: dict[bytes, dict[str, Any]] = {}
    return [span_from_row(row, resources) for row in rows]


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
    )


async def list_sessions(conn: Conn, agent_id: int | None, limit: int) -> list[wire.TraceSession]:
    rows = await conn.all("session_list", agent_id=agent_id, limit=limit)
    return [session_from_row(row) for row in rows]
