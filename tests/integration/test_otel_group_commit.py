"""Batches of one agent written together, in one transaction, each with its own answer.

On the real PostgreSQL: ``store.ingest`` of several batches counts each batch's stored,
duplicate and refused spans apart (a span two batches carry is the second's duplicate; a
span refused by the size cap is refused in its own batch's answer). Through a real server:
batches that arrive while one of the agent's batches is being written wait, are written
together (they share one ``received_at``), and each request gets its own partial-success
answer.
"""

from __future__ import annotations

import logging
import threading
import time

import httpx
import psycopg
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from evalkit.db import Database
from evalkit.otel.otlp import Incoming, decode_protobuf
from evalkit.store import otel as store
from tests.conftest import ADMIN_PASSWORD, start_server
from tests.integration.otel_helpers import (
    TRACES,
    agent_session,
    make_agent,
    mint,
    protobuf_body,
    recorder,
)
from tests.integration.test_otel_agent_hold import NAMES, NOW, START, agent, workspace


def trace(seed: int, session: str) -> list[Incoming]:
    """A trace of three spans (a root and two children) in ``session``."""
    trace_id, root_id = bytes([seed]) * 16, bytes([seed]) * 8
    made = [
        Span(
            trace_id=trace_id,
            span_id=bytes([seed]) * 7 + bytes([n]),
            parent_span_id=b"" if n == seed else root_id,
            name=f"step {n}",
            start_time_unix_nano=START + n,
            end_time_unix_nano=START + 1000,
            attributes=[KeyValue(key="session.id", value=AnyValue(string_value=session))],
        )
        for n in (seed, 1, 2)
    ]
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=made)])]
    ).SerializeToString()
    return decode_protobuf(body).spans


async def test_batches_written_together_are_counted_apart(db: Database, database_url: str) -> None:
    async with db.connection() as conn:
        await store.ensure_partition(conn, NOW.date())
    agent_id = agent(database_url, workspace(database_url), "bot")
    first = trace(3, "session-1")
    again = [first[1], *trace(4, "session-2")]  # one of the first batch's spans, resent
    big = trace(5, "session-3") + trace(6, "session-3")
    cap = sum(s.size for s in first)  # a trace fits a session; two traces do not
    async with db.pipelined_transaction() as conn:
        ingested = await store.ingest(
            conn,
            agent_id,
            [first, again, big],
            session_names=NAMES,
            max_session_bytes=cap,
            received_at=NOW,
        )
    one, two, three = ingested.batches
    assert (one.stored, one.duplicates, one.refused, one.refused_sessions) == (3, 0, 0, [])
    assert (two.stored, two.duplicates, two.refused, two.refused_sessions) == (3, 1, 0, [])
    assert (three.stored, three.refused, three.refused_sessions) == (3, 3, ["session-3"])
    async with db.connection() as conn:
        counts = {
            session_id: (row["span_count"], row["rejected_spans"], row["truncated"])
            for session_id in ("session-1", "session-2", "session-3")
            if (row := await store.session_row(conn, agent_id, session_id)) is not None
        }
    assert counts == {
        "session-1": (3, 0, False),
        "session-2": (3, 0, False),
        "session-3": (3, 3, True),
    }


def _export(session: str, repeat: int) -> bytes:
    with recorder() as (tracer, memory):
        for _ in range(repeat):
            agent_session(tracer, session)
        return protobuf_body(memory.get_finished_spans())


def _lock_waiters(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"waited 30 s for {what}"
        time.sleep(0.02)


def test_batches_waiting_for_a_write_go_together_each_with_its_own_answer(
    database_url: str, tmp_path, caplog
) -> None:
    def small(settings):
        settings.otel.max_session_bytes = 2500

    caplog.set_level(logging.DEBUG, logger="evalkit.edge.group_commit")
    server = start_server(database_url, tmp_path, configure=small)
    try:
        admin = httpx.post(
            f"{server.url}/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        ).json()["token"]
        make_agent(server, admin, "admin")
        token = mint(server, admin, "admin")
        bodies = {"warm": _export("warm", 1), "first": _export("first", 1)}
        bodies["big"] = _export("big", 4)
        bodies |= {f"small-{n}": _export(f"small-{n}", 1) for n in range(3)}
        answers: dict[str, httpx.Response] = {}

        def post(name: str) -> None:
            answers[name] = httpx.post(
                server.url + TRACES,
                content=bodies[name],
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/x-protobuf",
                },
                timeout=60,
            )

        post("warm")  # the edge now remembers the token: every batch below is grouped alike
        # The agent's row locked: the first batch's write waits for it, and the batches
        # after it wait for that write.
        holder = psycopg.connect(database_url)
        holder.execute("SELECT 1 FROM agents WHERE name = 'bot' FOR UPDATE")
        threads = [threading.Thread(target=post, args=("first",))]
        threads[0].start()
        _wait_for(lambda: _lock_waiters(database_url) == 1, "the first batch to wait")
        for name in ("small-0", "big", "small-1", "small-2"):
            threads.append(threading.Thread(target=post, args=(name,)))
            threads[-1].start()
        _wait_for(
            lambda: sum("waits for the 1 under way" in r.message for r in caplog.records) == 4,
            "the four batches to wait for the first one's write",
        )
        assert _lock_waiters(database_url) == 1  # the waiting batches hold no lock
        holder.rollback()
        holder.close()
        for thread in threads:
            thread.join(60)

        rejected = {}
        del answers["warm"]
        for name, answer in answers.items():
            assert answer.status_code == 200, (name, answer.text)
            parsed = ExportTraceServiceResponse.FromString(answer.content)
            rejected[name] = parsed.partial_success.rejected_spans
            message = parsed.partial_success.error_message
            assert ("big" in message) == (name == "big"), (name, message)
        with psycopg.connect(database_url) as conn:
            rows = conn.execute(
                "SELECT t.session_id, s.received_at, count(*) FROM spans s "
                "JOIN trace_sessions t USING (agent_id, trace_id) "
                "GROUP BY t.session_id, s.received_at"
            ).fetchall()
        stored = {session: count for session, _, count in rows}
        received = {session: at for session, at, _ in rows}
    finally:
        server.stop()
    # each answer counts only its own batch's refused spans
    assert rejected["big"] == 12 - stored["big"] > 0
    assert {name: rejected[name] for name in rejected if name != "big"} == dict.fromkeys(
        ("first", "small-0", "small-1", "small-2"), 0
    )
    assert {name: stored[name] for name in stored if name != "big"} == dict.fromkeys(
        ("warm", "first", "small-0", "small-1", "small-2"), 3
    )
    # the four that waited were written in one transaction, after the first
    together = {received[name] for name in ("small-0", "big", "small-1", "small-2")}
    assert len(together) == 1
    assert received["first"] < together.pop()
