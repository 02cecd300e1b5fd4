"""An agent's trace sessions and traces go with it, without a foreign key per row.

Batches hold their agent once (``trace_claim_many``, FOR KEY SHARE), an orphan trace's
settling holds it too (``agent_hold``), and an agent's delete locks it and removes its rows
(``agent_delete``). On the real PostgreSQL: the delete removes what the agent had and
nothing of another agent; it waits for a batch in flight and removes what that batch
committed; a batch after it is refused and writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from evalkit.db import Conn, Database
from evalkit.errors import Conflict
from evalkit.otel.otlp import Incoming, decode_protobuf
from evalkit.store import otel as store
from evalkit.store.agents import delete_agent
from evalkit.store.workspaces import WorkspaceRow
from tests.integration.db_helpers import sql

NOW = datetime.now(UTC)
START = int(NOW.timestamp() * 1e9)
NAMES = ["session.id"]
CAP = 10_000_000


def workspace(database_url: str) -> WorkspaceRow:
    [(ws_id, created_at)] = sql(
        database_url,
        "INSERT INTO workspaces (name, kind) VALUES ('team', 'shared') RETURNING id, created_at",
    )
    return WorkspaceRow(
        {
            "id": ws_id,
            "owner": None,
            "created_at": created_at,
            "promotes_to": None,
            "promoted_from": None,
            "name": "team",
            "kind": "shared",
            "owner_id": None,
            "actor_role": None,
        }
    )


def agent(database_url: str, ws: WorkspaceRow, name: str) -> int:
    [(agent_id,)] = sql(
        database_url,
        "INSERT INTO agents (workspace_id, name) VALUES (%s, %s) RETURNING id",
        (ws.id, name),
    )
    return int(agent_id)  # type: ignore[call-overload]


def spans(seed: int, *, with_root: bool) -> list[Incoming]:
    """A session of three spans (root, two children), or its two children only (a trace
    still waiting for its root)."""
    trace_id = bytes([seed]) * 16
    root_id = bytes([seed]) * 7 + b"\x01"
    session = KeyValue(key="session.id", value=AnyValue(string_value=f"session-{seed}"))
    made = [
        Span(
            trace_id=trace_id,
            span_id=bytes([seed]) * 7 + bytes([2 + n]),
            parent_span_id=root_id,
            name=f"step {n}",
            start_time_unix_nano=START + n,
            end_time_unix_nano=START + n + 1000,
            attributes=[session],
        )
        for n in range(2)
    ]
    if with_root:
        made.append(
            Span(
                trace_id=trace_id,
                span_id=root_id,
                name="agent.run",
                start_time_unix_nano=START,
                end_time_unix_nano=START + 5000,
                attributes=[session],
            )
        )
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=made)])]
    ).SerializeToString()
    return decode_protobuf(body).spans


async def ingest(conn: Conn, agent_id: int, batch: list[Incoming]) -> store.IngestResult:
    copied = await store.copy_batch(
        conn, agent_id, batch, session_names=NAMES, max_session_bytes=CAP, received_at=NOW
    )
    await copied.write_back(conn)
    return copied.result


async def settle(conn: Conn, agent_id: int, trace_id: bytes) -> store.OrphanOutcome | None:
    """Settle a trace still waiting for its root, as the orphan sweep does an hour on."""
    return await store.settle_orphan(
        conn,
        agent_id,
        trace_id,
        names=NAMES,
        before=NOW + timedelta(hours=1),
        max_session_bytes=CAP,
    )


def rows_of(database_url: str, agent_id: int) -> tuple[int, int]:
    """How many trace sessions and traces the agent has."""
    [(sessions, traces)] = sql(
        database_url,
        "SELECT (SELECT count(*) FROM sessions WHERE agent_id = %s), "
        "(SELECT count(*) FROM trace_sessions WHERE agent_id = %s)",
        (agent_id, agent_id),
    )
    return int(sessions), int(traces)  # type: ignore[call-overload]


@pytest.fixture
async def setup(db: Database, database_url: str) -> tuple[WorkspaceRow, int, int]:
    async with db.connection() as conn:
        await store.ensure_partition(conn, NOW.date())
    ws = workspace(database_url)
    return ws, agent(database_url, ws, "gone"), agent(database_url, ws, "kept")


async def test_a_deleted_agent_takes_its_sessions_and_traces_and_no_other_agents(
    db: Database, database_url: str, setup: tuple[WorkspaceRow, int, int]
) -> None:
    ws, gone, kept = setup
    for agent_id in (gone, kept):
        async with db.pipelined_transaction() as conn:
            await ingest(conn, agent_id, spans(1, with_root=True) + spans(2, with_root=False))
        assert rows_of(database_url, agent_id) == (1, 2)  # a session; its trace and a pending

    async with db.transaction() as conn:
        await delete_agent(conn, ws, "gone", force=False)

    assert rows_of(database_url, gone) == (0, 0)
    assert rows_of(database_url, kept) == (1, 2)


async def wait_until_blocked(database_url: str, task: asyncio.Task[object]) -> None:
    """Until a backend waits for a lock (or the task ended without waiting)."""
    deadline = time.monotonic() + 30
    while not task.done():
        waiting = sql(
            database_url,
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        if waiting[0][0]:
            return
        assert time.monotonic() < deadline, "the delete neither waited nor finished"
        await asyncio.sleep(0.02)


async def test_a_delete_waits_for_the_batch_in_flight_and_removes_what_it_stored(
    db: Database, database_url: str, setup: tuple[WorkspaceRow, int, int]
) -> None:
    ws, gone, _ = setup

    async def delete() -> None:
        async with db.transaction() as conn:
            await delete_agent(conn, ws, "gone", force=False)

    async with db.pipelined_transaction() as conn:
        stored = await ingest(conn, gone, spans(3, with_root=True) + spans(4, with_root=False))
        assert stored.stored == 5
        deleting = asyncio.create_task(delete())
        await wait_until_blocked(database_url, deleting)
        assert not deleting.done(), "the delete did not wait for the batch holding the agent"
    await deleting

    assert rows_of(database_url, gone) == (0, 0)


async def test_a_batch_for_a_deleted_agent_is_refused_and_writes_nothing(
    db: Database, database_url: str, setup: tuple[WorkspaceRow, int, int]
) -> None:
    ws, gone, _ = setup
    async with db.transaction() as conn:
        await delete_agent(conn, ws, "gone", force=False)

    with pytest.raises(Conflict) as refused:
        async with db.pipelined_transaction() as conn:
            await ingest(conn, gone, spans(5, with_root=True))
    assert refused.value.code == "agent-deleted"
    assert f"agent {gone} was deleted while this batch was being stored" in str(refused.value)
    assert rows_of(database_url, gone) == (0, 0)
    [(stored,)] = sql(database_url, "SELECT count(*) FROM spans WHERE agent_id = %s", (gone,))
    assert stored == 0


async def test_a_delete_waits_for_an_orphan_being_settled_and_removes_its_session(
    db: Database, database_url: str, setup: tuple[WorkspaceRow, int, int]
) -> None:
    ws, gone, _ = setup
    async with db.pipelined_transaction() as conn:
        await ingest(conn, gone, spans(6, with_root=False))

    async def delete() -> None:
        async with db.transaction() as conn:
            await delete_agent(conn, ws, "gone", force=False)

    async with db.transaction() as conn:
        outcome = await settle(conn, gone, bytes([6]) * 16)
        assert outcome is not None and outcome.session_id == "session-6"
        deleting = asyncio.create_task(delete())
        await wait_until_blocked(database_url, deleting)
        assert not deleting.done(), "the delete did not wait for the orphan's settling"
    await deleting

    assert rows_of(database_url, gone) == (0, 0)  # the session the settling created too
    async with db.transaction() as conn:
        again = await settle(conn, gone, bytes([6]) * 16)
    assert again is None
