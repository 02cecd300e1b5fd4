"""Helpers for the collector tests: an agent with a token, spans made by the real
OpenTelemetry SDK, and the OTLP/HTTP exporter (or hand-made OTLP/JSON bodies) to send them."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx
import psycopg
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evalkit.otel.mapping import load_starter
from tests.integration.runs_helpers import UNGUARDED

MAPPING = load_starter("openinference")
"""The shipped OpenInference starter: its session id is the ``session.id`` attribute."""
TRACES = "/api/otel/v1/traces"


def api(server, token: str, method: str, path: str, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", **kw.pop("headers", {})}
    return httpx.request(method, server.url + path, headers=headers, **kw)


def make_agent(server, token: str, workspace: str, name: str = "bot", mapping=MAPPING) -> None:
    r = api(
        server,
        token,
        "POST",
        f"/api/workspaces/{workspace}/agents",
        json={"name": name, "mapping": mapping},
    )
    assert r.status_code == 201, r.text


def mint(server, token: str, workspace: str, agent: str = "bot") -> str:
    r = api(server, token, "POST", f"/api/workspaces/{workspace}/agents/{agent}/tokens", json={})
    assert r.status_code == 201, r.text
    return r.json()["token"]


@contextmanager
def recorder(service: str = "test-agent") -> Iterator[tuple[object, InMemorySpanExporter]]:
    """A tracer whose finished spans are kept in memory, to be exported (and re-exported)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        yield provider.get_tracer("evalkit-tests", "1.0"), memory
    finally:
        provider.shutdown()


def agent_session(
    tracer, session_id: str, question: str = "What is 2 + 3?", answer: str = "5"
) -> None:
    """An OpenInference-shaped agent turn: an AGENT root with an LLM and a TOOL child."""
    with tracer.start_as_current_span(
        "agent",
        attributes={
            "openinference.span.kind": "AGENT",
            "session.id": session_id,
            "input.value": question,
        },
    ) as root:
        with tracer.start_as_current_span(
            "llm",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-test",
                "llm.token_count.prompt": 12,
                "llm.token_count.completion": 3,
                "llm.invocation_parameters": '{"temperature": 0}',
            },
        ) as llm:
            llm.add_event("thinking", {"text": "add the numbers", "step": 1})
        with tracer.start_as_current_span(
            "calculator",
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": "calculator",
                "tool.parameters": ["2", "3"],
                "score": 0.5,
                "ok": True,
            },
        ):
            pass
        root.set_attribute("output.value", answer)


def exporter(server, token: str, *, gzip: bool = False, headers=None) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=server.url + TRACES,
        headers={"Authorization": f"Bearer {token}", **(headers or {})},
        compression=Compression.Gzip if gzip else Compression.NoCompression,
        timeout=10,
    )


def protobuf_body(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def _hex_ids(node: object) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def json_body(spans: Sequence[ReadableSpan]) -> dict:
    """The OTLP/JSON form of the SDK's export: protobuf's JSON mapping with hex ids, as the
    OTLP spec writes them (the Python exporter sends protobuf only)."""
    body = json_format.MessageToDict(encode_spans(spans))
    _hex_ids(body)
    return body


def stored_spans(server) -> list[tuple[str, str, str | None]]:
    """(trace id, span id, name) of every stored span."""
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute(
            "SELECT encode(trace_id, 'hex'), encode(span_id, 'hex'), name FROM spans "
            "ORDER BY start_ns, span_id"
        ).fetchall()
    return [tuple(r) for r in rows]


def sessions(server) -> dict[str, dict]:
    with psycopg.connect(server.db_url) as conn:
        cur = conn.execute(
            "SELECT session_id, span_count, bytes, truncated, rejected_spans FROM sessions"
        )
        return {
            r[0]: {"spans": r[1], "bytes": r[2], "truncated": r[3], "rejected": r[4]}
            for r in cur.fetchall()
        }


def settle_jobs(server) -> list[dict]:
    with psycopg.connect(server.db_url) as conn:
        rows = conn.execute(
            "SELECT queueing_lock, args, scheduled_at > now() FROM procrastinate_jobs "
            "WHERE task_name = 'settle_session' ORDER BY id"
        ).fetchall()
    return [{"lock": r[0], "args": r[1], "later": r[2]} for r in rows]


def collecting_run(server, token: str, workspace: str, agent: str, session_id: str) -> int:
    """A run of ``agent`` waiting in collecting for ``session_id`` (an experiment over a
    one-case dataset, its run moved to collecting as the engine would)."""
    r = api(
        server,
        token,
        "POST",
        f"/api/workspaces/{workspace}/datasets/traced/sync",
        json={"cases": [{"id": f"c-{session_id}", "content": {"input": {"q": "2 + 3?"}}}]},
    )
    assert r.status_code == 200, r.text
    r = api(
        server,
        token,
        "POST",
        "/api/experiments",
        json={
            "dataset": f"traced@{workspace}",
            "agent": f"{agent}@{workspace}",
            "capabilities": {},
        },
    )
    assert r.status_code in (200, 201), r.text
    with psycopg.connect(server.db_url) as conn:
        conn.execute(UNGUARDED)
        row = conn.execute(
            "UPDATE runs SET state = 'collecting', session_id = %s "
            "WHERE id = (SELECT max(id) FROM runs) RETURNING id",
            [session_id],
        ).fetchone()
    assert row is not None
    return int(row[0])
