"""What the collector refuses, each with its exact status and message, in the request's
encoding (a google.rpc.Status for protobuf, its JSON form plus evalkit's error object)."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)

from evalkit.edge.routes.otel import status_protobuf
from tests.conftest import ADMIN_PASSWORD, start_server
from tests.integration.otel_helpers import (
    TRACES,
    agent_session,
    api,
    json_body,
    make_agent,
    mint,
    protobuf_body,
    recorder,
    stored_spans,
)

PB = {"Content-Type": "application/x-protobuf"}


def status_of(r: httpx.Response) -> tuple[int, str]:
    """(code, message) of a protobuf google.rpc.Status body."""
    data, code, i = r.content, 0, 0
    assert data[0] == 0x08
    i, code = 1, data[1]
    assert data[i + 1] == 0x12
    i += 2
    length, shift = 0, 0
    while True:
        byte = data[i]
        length |= (byte & 0x7F) << shift
        i += 1
        shift += 7
        if not byte & 0x80:
            break
    return code, data[i : i + length].decode()


def test_status_encoding_matches_the_spec():
    from google.protobuf import descriptor_pb2  # noqa: F401  (protobuf is there)

    body = status_protobuf(3, "bad")
    assert body == b"\x08\x03\x12\x03bad"


@pytest.fixture
def small_server(database_url, tmp_path):
    def configure(settings):
        settings.otel.max_batch_bytes = 10_000
        settings.database.pool_max = 3  # one ingest slot

    server = start_server(database_url, tmp_path, configure=configure)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tokens(small_server):
    admin = httpx.post(
        f"{small_server.url}/api/auth/login",
        json={"username": "admin", "password": ADMIN_PASSWORD},
    ).json()["token"]
    make_agent(small_server, admin, "admin")
    return admin, mint(small_server, admin, "admin")


def one_session() -> list:
    with recorder() as (tracer, memory):
        agent_session(tracer, "s1")
        return list(memory.get_finished_spans())


def test_garbage_bytes_are_400_in_protobuf(small_server, tokens):
    r = api(small_server, tokens[1], "POST", TRACES, content=b"\xff\xff\xff\xff", headers=PB)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/x-protobuf"
    code, message = status_of(r)
    assert code == 3
    assert message.startswith(
        "the body is not a protobuf OTLP trace export (ExportTraceServiceRequest): "
    )


def test_garbage_json_is_400(small_server, tokens):
    r = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == 3 and body["error"]["code"] == "not-traces"
    assert body["message"].startswith("the body is not valid JSON")


def test_logs_and_metrics_payloads_are_named(small_server, tokens):
    logs = ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                scope_logs=[
                    ScopeLogs(
                        log_records=[
                            LogRecord(
                                time_unix_nano=1_700_000_000_000_000_000,
                                severity_number=9,
                                severity_text="INFO",
                                body=AnyValue(string_value="agent started"),
                            )
                        ]
                    )
                ]
            )
        ]
    )
    metrics = ExportMetricsServiceRequest(
        resource_metrics=[
            ResourceMetrics(
                scope_metrics=[
                    ScopeMetrics(
                        metrics=[
                            Metric(
                                name="llm.tokens",
                                gauge=Gauge(data_points=[NumberDataPoint(as_int=12)]),
                            )
                        ]
                    )
                ]
            )
        ]
    )
    for message, signal in ((logs, "logs"), (metrics, "metrics")):
        r = api(
            small_server, tokens[1], "POST", TRACES, content=message.SerializeToString(), headers=PB
        )
        assert r.status_code == 400, signal
        assert status_of(r)[1].startswith(
            f"this is an OTLP {signal} export (Export{signal.title()}ServiceRequest), sent to "
            "the traces URL; evalkit's collector takes traces only"
        )
    r = api(small_server, tokens[1], "POST", TRACES, json={"resourceLogs": []})
    assert r.status_code == 400 and r.json()["error"]["code"] == "not-traces"
    assert "this is an OTLP logs export" in r.json()["message"]
    for signal in ("logs", "metrics"):
        r = api(small_server, tokens[1], "POST", f"/api/otel/v1/{signal}", json={})
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "traces-only"
        assert r.json()["message"].startswith(
            f"evalkit's collector takes traces only, not {signal}"
        )


def test_wrong_content_type_and_encoding_are_415(small_server, tokens):
    r = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=b"x",
        headers={"Content-Type": "text/plain"},
    )
    assert r.status_code == 415
    assert r.json()["message"] == (
        "Content-Type 'text/plain' is not an OTLP encoding; send application/x-protobuf or "
        "application/json"
    )
    r = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=b"x",
        headers={**PB, "Content-Encoding": "br"},
    )
    assert r.status_code == 415
    assert status_of(r)[1] == (
        "Content-Encoding 'br' is not supported; send gzip, deflate or no compression"
    )


def test_oversize_bodies_are_413(small_server, tokens):
    big = protobuf_body(one_session() * 20)
    assert len(big) > 10_000
    expected = "the body is over otel.max_batch_bytes (10000 bytes)"
    r = api(small_server, tokens[1], "POST", TRACES, content=big, headers=PB)
    assert r.status_code == 413 and status_of(r)[1].startswith(expected)
    chunked = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=iter([big[i : i + 1000] for i in range(0, len(big), 1000)]),
        headers=PB,
    )
    assert chunked.status_code == 413 and status_of(chunked)[1].startswith(expected)
    assert stored_spans(small_server) == []


def test_gzip_bomb_is_413_without_inflating_it(small_server, tokens):
    bomb = gzip.compress(b"\0" * 8_000_000)  # 8 MB from under 10 kB
    assert len(bomb) < 10_000
    r = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=bomb,
        headers={**PB, "Content-Encoding": "gzip"},
    )
    assert r.status_code == 413
    assert status_of(r)[1].startswith(
        "the decompressed body is over otel.max_batch_bytes (10000 bytes)"
    )


def test_broken_gzip_is_400(small_server, tokens):
    body = gzip.compress(protobuf_body(one_session()))
    r = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=body[: len(body) // 2],
        headers={**PB, "Content-Encoding": "gzip"},
    )
    assert r.status_code == 400
    assert status_of(r)[1] == "the compressed body ends early (truncated gzip or deflate stream)"
    r = api(
        small_server,
        tokens[1],
        "POST",
        TRACES,
        content=zlib.compress(protobuf_body(one_session())),
        headers={**PB, "Content-Encoding": "deflate"},
    )
    assert r.status_code == 200  # deflate (zlib) works too


def test_invalid_ids_are_refused_in_partial_success(small_server, tokens):
    spans = one_session()
    body = json_body(spans)
    bad = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    bad[0]["traceId"] = "not-hex"
    bad[1]["spanId"] = "00" * 8
    r = api(small_server, tokens[1], "POST", TRACES, json=body)
    assert r.status_code == 200
    assert r.json() == {
        "partialSuccess": {
            "rejectedSpans": "2",
            "errorMessage": "2 span(s) have an invalid id (a trace id is 16 bytes, a span id 8, "
            "not all zero; in JSON, hex text)",
        }
    }
    assert len(stored_spans(small_server)) == 1
    # the same in protobuf: a span id of the wrong length
    with recorder() as (tracer, memory):
        agent_session(tracer, "s2")
        pb = protobuf_body(memory.get_finished_spans())
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(pb)
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x01\x02"
    r = api(
        small_server, tokens[1], "POST", TRACES, content=request.SerializeToString(), headers=PB
    )
    answer = ExportTraceServiceResponse.FromString(r.content)
    assert r.status_code == 200 and answer.partial_success.rejected_spans == 1


def test_empty_export_is_a_success(small_server, tokens):
    r = api(small_server, tokens[1], "POST", TRACES, content=b"", headers=PB)
    assert r.status_code == 200 and r.content == b""
    r = api(small_server, tokens[1], "POST", TRACES, json={})
    assert r.status_code == 200 and r.json() == {}


def test_who_sends_for_which_agent(small_server, tokens):
    admin, agent = tokens
    body = protobuf_body(one_session())
    r = api(small_server, "eka_not-a-token", "POST", TRACES, content=body, headers=PB)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert status_of(r) == (
        16,
        "the agent token is not valid (was its agent deleted?); mint one with "
        "`evalkit tokens create --agent NAME@WORKSPACE`",
    )
    r = api(small_server, "ekl_not-a-token", "POST", TRACES, json={})
    assert r.status_code == 401 and r.json()["error"]["code"] == "bad-token"
    r = httpx.post(small_server.url + TRACES, json={})
    assert r.status_code == 401 and r.json()["error"]["code"] == "login-required"
    # a user token must name the agent
    r = api(small_server, admin, "POST", TRACES, content=body, headers=PB)
    assert r.status_code == 400
    assert status_of(r)[1].startswith("name the agent these spans belong to")
    r = api(
        small_server,
        admin,
        "POST",
        TRACES,
        content=body,
        headers={**PB, "X-Evalkit-Agent": "nobody@admin"},
    )
    assert r.status_code == 404
    assert status_of(r) == (
        5,
        "no agent nobody@admin; see `evalkit agents list --workspace admin`",
    )
    # an agent token sends for its own agent only
    r = api(
        small_server,
        agent,
        "POST",
        TRACES,
        content=body,
        headers={**PB, "X-Evalkit-Agent": "other@admin"},
    )
    assert r.status_code == 403
    assert status_of(r)[1].startswith("this token sends spans for bot@admin, not other@admin")
    r = api(
        small_server,
        agent,
        "POST",
        TRACES,
        content=body,
        headers={**PB, "X-Evalkit-Agent": "bot@admin"},
    )
    assert r.status_code == 200
    # revoked: refused from then on
    with psycopg.connect(small_server.db_url) as conn:
        token_id = conn.execute("SELECT max(id) FROM agent_tokens").fetchone()[0]
    assert api(small_server, admin, "POST", f"/api/tokens/{token_id}/revoke").status_code == 200
    r = api(small_server, agent, "POST", TRACES, content=body, headers=PB)
    assert r.status_code == 401
    assert status_of(r)[1].startswith(f"this agent token (id {token_id}) was revoked")


def test_a_remembered_agent_token_is_checked_on_every_request(small_server, tokens):
    """The edge remembers which agent a token names, but not that the token is valid: once
    it is revoked (or its agent deleted), its next request is refused whatever it carries,
    and nothing of it is stored."""
    admin, _ = tokens
    body = protobuf_body(one_session())
    other = protobuf_body(one_session())  # new trace and span ids: nothing to deduplicate
    cases = [(other, PB), (b"", PB), (b"\xff not protobuf", PB), (other, {"Content-Type": "x/y"})]
    for content, headers in cases:
        agent = mint(small_server, admin, "admin")
        r = api(small_server, agent, "POST", TRACES, content=body, headers=PB)
        assert r.status_code == 200  # the edge now remembers the token
        stored = stored_spans(small_server)
        with psycopg.connect(small_server.db_url) as conn:
            token_id = conn.execute("SELECT max(id) FROM agent_tokens").fetchone()[0]
        assert api(small_server, admin, "POST", f"/api/tokens/{token_id}/revoke").is_success
        r = api(small_server, agent, "POST", TRACES, content=content, headers=headers)
        assert r.status_code == 401, content
        message = r.json()["error"]["message"] if headers is not PB else status_of(r)[1]
        assert message.startswith(f"this agent token (id {token_id}) was revoked")
        assert stored_spans(small_server) == stored

    agent = mint(small_server, admin, "admin")
    assert api(small_server, agent, "POST", TRACES, content=body, headers=PB).status_code == 200
    assert api(small_server, admin, "DELETE", "/api/workspaces/admin/agents/bot").is_success
    r = api(small_server, agent, "POST", TRACES, content=other, headers=PB)
    assert r.status_code == 401
    assert status_of(r)[1].startswith("the agent token is not valid (was its agent deleted?)")


def test_busy_collector_answers_429_with_retry_after(small_server, tokens):
    body = protobuf_body(one_session())

    def slow_body():
        yield body[:10]
        time.sleep(3.5)
        yield body[10:]

    slow: dict = {}

    def hold_the_slot():
        slow["r"] = api(small_server, tokens[1], "POST", TRACES, content=slow_body(), headers=PB)

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    # Until the slow export holds the only slot, a second one is simply stored (a repeat of
    # the same spans, deduplicated): ask until the slot is seen busy, not after a fixed wait.
    deadline = time.monotonic() + 3
    while True:
        r = api(small_server, tokens[1], "POST", TRACES, content=body, headers=PB)
        if r.status_code != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    holder.join()
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert status_of(r) == (8, "every ingest slot of this server is busy; retry after the delay")
    assert slow["r"].status_code == 200


def test_database_gone_is_503_with_retry_after(database_url, tmp_path, pg_admin_url):
    server = start_server(database_url, tmp_path)
    try:
        admin = httpx.post(
            f"{server.url}/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        ).json()["token"]
        make_agent(server, admin, "admin")
        agent = mint(server, admin, "admin")
        name = urlsplit(database_url).path.lstrip("/")
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
        r = api(server, agent, "POST", TRACES, content=protobuf_body(one_session()), headers=PB)
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert status_of(r)[0] == 14
    finally:
        server.stop()
