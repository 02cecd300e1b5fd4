"""The collector with the real OpenTelemetry SDK and OTLP/HTTP exporter: spans land once,
as received, in the session of their trace's root span."""

from __future__ import annotations

import gzip

import httpx
import psycopg
import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from evalkit.db import Database
from evalkit.store.otel import ns_to_datetime, session_row, spans_for_session
from tests.integration.otel_helpers import (
    MAPPING,
    TRACES,
    agent_session,
    api,
    collecting_run,
    exporter,
    json_body,
    make_agent,
    mint,
    protobuf_body,
    recorder,
    sessions,
    settle_jobs,
    stored_spans,
)


@pytest.fixture
def agent_token(server, admin_token):
    make_agent(server, admin_token, "admin")
    return mint(server, admin_token, "admin")


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_sdk_export_lands_once_with_a_retry(server, agent_token, compressed):
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        agent_session(tracer, "s2", "What is 6 * 7?")
        spans = memory.get_finished_spans()
    export = exporter(server, agent_token, gzip=compressed)
    assert export.export(spans[:4]) == SpanExportResult.SUCCESS
    assert export.export(spans) == SpanExportResult.SUCCESS  # 4 seen already, 2 new
    assert export.export(spans) == SpanExportResult.SUCCESS  # a retried export
    stored = stored_spans(server)
    assert len(stored) == 6
    assert sorted(s[1] for s in stored) == sorted(f"{s.context.span_id:016x}" for s in spans)
    assert {k: v["spans"] for k, v in sessions(server).items()} == {"s1": 3, "s2": 3}


def test_a_waiting_run_gets_one_settle_job(server, admin_token, agent_token):
    # path 3c: a harness agent whose trajectories come from its traces
    r = api(
        server,
        admin_token,
        "POST",
        "/api/workspaces/admin/agents",
        json={
            "name": "harnessed",
            "harness_url": "http://127.0.0.1:9",
            "trajectory_source": "otel",
            "mapping": MAPPING,
        },
    )
    assert r.status_code == 201, r.text
    agent_token = mint(server, admin_token, "admin", "harnessed")
    collecting_run(server, admin_token, "admin", "harnessed", "s1")
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        agent_session(tracer, "s2")
        spans = memory.get_finished_spans()
    export = exporter(server, agent_token)
    assert export.export(spans[:3]) == SpanExportResult.SUCCESS
    assert export.export(spans[3:]) == SpanExportResult.SUCCESS
    assert export.export(spans) == SpanExportResult.SUCCESS
    # s1's run waits: one job, a settle period later, however many batches came; s2 has no
    # run waiting (a run that reaches collecting later queues its own settle job)
    jobs = settle_jobs(server)
    assert [(j["lock"], j["args"], j["later"]) for j in jobs] == [
        ("settle:2:s1", {"agent_id": 2, "session_id": "s1"}, True)
    ]


async def test_spans_read_back_as_received(server, agent_token):
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS
    db = Database(server.db_url)
    await db.open()
    try:
        async with db.connection() as conn:
            read = await spans_for_session(conn, 1, "s1")
            row = await session_row(conn, 1, "s1")
    finally:
        await db.close()
    assert row is not None and row["span_count"] == 3 and not row["truncated"]
    assert (row["first_span_at"], row["last_span_at"]) == (
        ns_to_datetime(min(s.start_time for s in spans)),
        ns_to_datetime(max(s.end_time for s in spans)),
    )
    by_name = {s.name: s for s in read}
    assert [s.name for s in read] == ["agent", "llm", "calculator"]
    sent = {s.name: s for s in spans}
    for name, span in by_name.items():
        original = sent[name]
        assert span.trace_id == f"{original.context.trace_id:032x}"
        assert span.span_id == f"{original.context.span_id:016x}"
        assert span.start_ns == original.start_time and span.end_ns == original.end_time
        assert span.attributes == {
            k: list(v) if isinstance(v, tuple) else v for k, v in original.attributes.items()
        }
        assert span.resource["service.name"] == "test-agent"
        assert span.scope == "evalkit-tests"
    assert by_name["agent"].parent_span_id is None
    assert by_name["llm"].parent_span_id == by_name["agent"].span_id
    assert by_name["llm"].kind == 1  # INTERNAL
    event = by_name["llm"].events[0]
    assert (event.name, event.attributes) == ("thinking", {"text": "add the numbers", "step": 1})
    assert by_name["calculator"].attributes["tool.parameters"] == ["2", "3"]


def test_json_export_with_hex_ids(server, agent_token):
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    body = json_body(spans)
    r = api(server, agent_token, "POST", TRACES, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {}
    stored = stored_spans(server)
    assert sorted(s[0] for s in stored) == [f"{spans[0].context.trace_id:032x}"] * 3
    # the same again, gzipped and chunked (no Content-Length): stored once
    raw = gzip.compress(httpx.Request("POST", "/", json=body).content)
    r = api(
        server,
        agent_token,
        "POST",
        TRACES,
        content=iter([raw[:50], raw[50:]]),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert r.status_code == 200, r.text
    assert "content-length" not in r.request.headers
    assert len(stored_spans(server)) == 3


def test_protobuf_body_chunked_without_length(server, agent_token):
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        body = protobuf_body(memory.get_finished_spans())
    r = api(
        server,
        agent_token,
        "POST",
        TRACES,
        content=iter([body[:100], body[100:]]),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-type"] == "application/x-protobuf"
    assert len(stored_spans(server)) == 3


def test_children_before_the_root_join_its_session(server, agent_token):
    with recorder() as (tracer, memory):
        agent_session(tracer, "late-root")
        spans = memory.get_finished_spans()
    root = [s for s in spans if s.parent is None]
    children = [s for s in spans if s.parent is not None]
    export = exporter(server, agent_token)
    assert export.export(children) == SpanExportResult.SUCCESS
    assert len(stored_spans(server)) == 2
    assert sessions(server) == {}  # held under their trace until the root comes
    assert export.export(root) == SpanExportResult.SUCCESS
    assert sessions(server)["late-root"]["spans"] == 3


def test_children_follow_the_root_not_their_own_attribute(server, agent_token):
    with recorder() as (tracer, memory):
        with (
            tracer.start_as_current_span("agent", attributes={"session.id": "outer"}),
            tracer.start_as_current_span("child", attributes={"session.id": "other"}),
        ):
            pass
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS
    assert {k: v["spans"] for k, v in sessions(server).items()} == {"outer": 2}


def test_a_trace_without_session_attribute_is_its_own_session(server, agent_token):
    with recorder() as (tracer, memory):
        with tracer.start_as_current_span("plain"):
            pass
        spans = memory.get_finished_spans()
    assert exporter(server, agent_token).export(spans) == SpanExportResult.SUCCESS
    assert list(sessions(server)) == [f"{spans[0].context.trace_id:032x}"]


def test_user_token_with_agent_header(server, admin_token):
    make_agent(server, admin_token, "admin")
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    export = exporter(server, admin_token, headers={"X-Evalkit-Agent": "bot@admin"})
    assert export.export(spans) == SpanExportResult.SUCCESS
    assert len(stored_spans(server)) == 3


def test_session_over_its_cap_is_truncated(database_url, tmp_path):
    from tests.conftest import ADMIN_PASSWORD, start_server

    def small(settings):
        settings.otel.max_session_bytes = 2500

    server = start_server(database_url, tmp_path, configure=small)
    try:
        token = httpx.post(
            f"{server.url}/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        ).json()["token"]
        make_agent(server, token, "admin")
        agent = mint(server, token, "admin")
        with recorder() as (tracer, memory):
            for _ in range(4):
                agent_session(tracer, "big")
            spans = memory.get_finished_spans()
        r = api(
            server,
            agent,
            "POST",
            TRACES,
            content=protobuf_body(spans),
            headers={"Content-Type": "application/x-protobuf"},
        )
        assert r.status_code == 200
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        answer = ExportTraceServiceResponse.FromString(r.content)
        stored = len(stored_spans(server))
        assert 0 < stored < 12
        assert answer.partial_success.rejected_spans == 12 - stored
        assert "otel.max_session_bytes (2500 bytes)" in answer.partial_success.error_message
        assert "big" in answer.partial_success.error_message
        row = sessions(server)["big"]
        assert row["truncated"] and row["rejected"] == 12 - stored and row["bytes"] <= 2500
    finally:
        server.stop()


def test_a_span_twice_in_one_export_is_stored_once(server, agent_token):
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    r = api(
        server,
        agent_token,
        "POST",
        TRACES,
        content=protobuf_body([*spans, spans[0], spans[1]]),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert r.status_code == 200 and r.content == b""
    assert len(stored_spans(server)) == 3
    assert sessions(server)["s1"]["spans"] == 3
    with psycopg.connect(server.db_url) as conn:
        times = conn.execute(
            "SELECT first_span_at, last_span_at FROM sessions WHERE session_id = 's1'"
        ).fetchone()
    assert times == (
        ns_to_datetime(min(s.start_time for s in spans)),
        ns_to_datetime(max(s.end_time for s in spans)),
    )


def test_concurrent_exports_of_one_session_count_exactly(server, agent_token):
    """Batches that share traces and a session, children and roots apart, some spans sent
    twice, all at once: every span stored once and counted once, no trace left pending."""
    from concurrent.futures import ThreadPoolExecutor

    with recorder() as (tracer, memory):
        for n in range(12):
            agent_session(tracer, "shared", f"question {n}")
        spans = memory.get_finished_spans()
    children = [s for s in spans if s.parent is not None]
    roots = [s for s in spans if s.parent is None]
    batches = [children[i::4] for i in range(4)] + [roots[i::3] for i in range(3)]
    batches += [spans[::5], roots[:2] + children[:2]]  # repeats of spans sent elsewhere

    def post(batch):
        return api(
            server,
            agent_token,
            "POST",
            TRACES,
            content=protobuf_body(batch),
            headers={"Content-Type": "application/x-protobuf"},
        )

    with ThreadPoolExecutor(len(batches)) as pool:
        answers = list(pool.map(post, batches))
    assert [r.status_code for r in answers] == [200] * len(batches)
    assert all(r.content == b"" for r in answers)
    assert len(stored_spans(server)) == len(spans) == 36
    row = sessions(server)["shared"]
    assert (row["spans"], row["truncated"]) == (36, False)
    with psycopg.connect(server.db_url) as conn:
        pending = conn.execute(
            "SELECT count(*) FROM trace_sessions WHERE session_id IS DISTINCT FROM 'shared' "
            "OR pending_spans <> 0"
        ).fetchone()[0]
        total = conn.execute("SELECT sum(size) FROM spans").fetchone()[0]
    assert pending == 0 and row["bytes"] == total


def test_concurrent_exports_never_take_a_session_over_its_cap(database_url, tmp_path):
    """Batches each well under the cap, together over it, all at once: whichever way they
    interleave, the session keeps at most the cap and every span is stored or refused."""
    from concurrent.futures import ThreadPoolExecutor

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    from tests.conftest import ADMIN_PASSWORD, start_server

    def small(settings):
        settings.otel.max_session_bytes = 6000

    server = start_server(database_url, tmp_path, configure=small)
    try:
        token = httpx.post(
            f"{server.url}/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        ).json()["token"]
        make_agent(server, token, "admin")
        agent = mint(server, token, "admin")
        with recorder() as (tracer, memory):
            for n in range(16):
                agent_session(tracer, "capped", f"question {n}")
            spans = memory.get_finished_spans()
        traces: dict[int, list] = {}
        for span in spans:
            traces.setdefault(span.context.trace_id, []).append(span)
        groups = list(traces.values())
        batches = [[s for group in groups[i::8] for s in group] for i in range(8)]

        def post(batch):
            r = api(
                server,
                agent,
                "POST",
                TRACES,
                content=protobuf_body(batch),
                headers={"Content-Type": "application/x-protobuf"},
            )
            assert r.status_code == 200, r.content
            return ExportTraceServiceResponse.FromString(r.content).partial_success

        with ThreadPoolExecutor(len(batches)) as pool:
            answers = list(pool.map(post, batches))
        refused = sum(a.rejected_spans for a in answers)
        stored = len(stored_spans(server))
        assert refused > 0 and stored + refused == len(spans) == 48
        row = sessions(server)["capped"]
        with psycopg.connect(server.db_url) as conn:
            total = conn.execute("SELECT sum(size) FROM spans").fetchone()[0]
        assert row["bytes"] == total <= 6000
        assert row["truncated"] and row["rejected"] == refused and row["spans"] == stored
    finally:
        server.stop()


def test_a_retried_export_leaves_its_sessions_as_they_were(server, agent_token):
    """A retry that brings nothing new neither stores a span nor touches its session."""
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    export = exporter(server, agent_token)
    assert export.export(spans) == SpanExportResult.SUCCESS
    query = "SELECT span_count, bytes, last_received_at FROM sessions WHERE session_id = 's1'"
    with psycopg.connect(server.db_url) as conn:
        before = conn.execute(query).fetchone()
    assert export.export(spans) == SpanExportResult.SUCCESS
    with psycopg.connect(server.db_url) as conn:
        after = conn.execute(query).fetchone()
    assert len(stored_spans(server)) == 3
    assert after == before


def test_a_copy_stored_while_the_batch_waits_for_its_trace_is_seen(server, agent_token):
    """Two copies of a new trace's spans in flight at once: the batch that waits for the
    other's lock on the trace stores only what the other did not. Here the other is a
    transaction held open by the test (a trace created with one of the spans, as an earlier
    batch would); the export waits for it, then finds that span stored."""
    import threading
    import time

    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        spans = memory.get_finished_spans()
    root = next(s for s in spans if s.parent is None)
    trace_id = root.context.trace_id.to_bytes(16, "big")
    span_id = root.context.span_id.to_bytes(8, "big")
    with psycopg.connect(server.db_url) as other:
        agent_id = other.execute("SELECT id FROM agents WHERE name = 'bot'").fetchone()[0]
        other.execute(
            "INSERT INTO trace_sessions (agent_id, trace_id, session_id, first_received_at, "
            "last_received_at) VALUES (%s, %s, 's1', now() - interval '1 minute', now())",
            [agent_id, trace_id],
        )
        other.execute(
            "INSERT INTO spans (received_at, agent_id, trace_id, span_id, name, kind, start_ns, "
            "end_ns, status_code, body, resource, size) "
            "VALUES (now(), %s, %s, %s, 'agent', 1, 1, 2, 0, '', '', 100)",
            [agent_id, trace_id, span_id],
        )
        answers = []
        export = exporter(server, agent_token)
        sender = threading.Thread(target=lambda: answers.append(export.export(spans)))
        sender.start()
        deadline = time.monotonic() + 10
        with psycopg.connect(server.db_url) as watch:
            while not watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()[0]:
                assert time.monotonic() < deadline, "the export never waited for the trace"
                time.sleep(0.02)
        other.commit()
        sender.join(10)
    assert answers == [SpanExportResult.SUCCESS]
    stored = [s[1] for s in stored_spans(server)]
    assert sorted(stored) == sorted(f"{s.context.span_id:016x}" for s in spans)
    assert sessions(server)["s1"]["spans"] == 2  # the root came with the other copy
