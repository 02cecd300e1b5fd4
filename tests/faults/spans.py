"""Spans with known ids made by the real OpenTelemetry SDK, and senders that export them
through the SDK's OTLP/HTTP exporter and note which exports were acknowledged."""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections import Counter

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from tests.conftest import ADMIN_PASSWORD
from tests.faults.processes import query
from tests.integration.otel_helpers import TRACES, agent_session, make_agent, mint

EXPORT_TIMEOUT = 30.0
"""The exporter's budget per export, its retries included (backoff 1, 2, 4, 8 s...)."""
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"

Key = tuple[str, str]
"""(trace id, span id) in hex."""


class SeededIds(IdGenerator):
    """Trace and span ids from the test's seeded generator, so a replay sends the same."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1


def make_batches(rng: random.Random, traces: int, batch_spans: int) -> list[list[ReadableSpan]]:
    """OpenInference agent turns (a root with an LLM and a tool child, 3 spans), one
    session per trace, cut into batches regardless of traces: with ``batch_spans`` not a
    multiple of 3 a trace's root may come a batch after its children, as from a batch
    span processor."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "fault-agent"}), id_generator=SeededIds(rng)
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("evalkit-fault-tests", "1.0")
    for n in range(traces):
        agent_session(tracer, f"s-{n}")
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    return [spans[i : i + batch_spans] for i in range(0, len(spans), batch_spans)]


def key(span: ReadableSpan) -> Key:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def keys(batches: list[list[ReadableSpan]]) -> set[Key]:
    return {key(span) for batch in batches for span in batch}


def rootless_traces(batches: list[list[ReadableSpan]]) -> set[str]:
    """Trace ids among ``batches`` whose root span is not among them."""
    traces = {key(span)[0] for batch in batches for span in batch}
    rooted = {key(span)[0] for batch in batches for span in batch if span.parent is None}
    return traces - rooted


def exporter(url: str, token: str) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=url + TRACES, headers={"Authorization": f"Bearer {token}"}, timeout=EXPORT_TIMEOUT
    )


class ExporterLog(logging.Handler):
    """Counts the exporter's own retries (it logs a warning before each) and why it gave
    up on an export (it logs an error). Attached to its logger while the test runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retries = 0
        self.gave_up: Counter[str] = Counter()

    def __enter__(self) -> ExporterLog:
        logging.getLogger(EXPORTER_LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(EXPORTER_LOGGER).removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "retrying in" in message:
            self.retries += 1
        elif record.levelno >= logging.ERROR:
            self.gave_up[message[:160]] += 1


class Senders:
    """Threads taking batches in order and exporting each once through an exporter of
    their own; ``acked[i]`` says whether export ``i`` was answered 200 (after the
    exporter's retries), ``busy`` which exports are under way now."""

    def __init__(
        self, url: str, token: str, batches: list[list[ReadableSpan]], *, threads: int = 3
    ) -> None:
        self.batches = batches
        self.work: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(batches)):
            self.work.put(index)
        self.acked: dict[int, bool] = {}
        self.busy: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(exporter(url, token),), daemon=True)
            for _ in range(threads)
        ]

    def start(self) -> Senders:
        for thread in self.threads:
            thread.start()
        return self

    def _run(self, sender: OTLPSpanExporter) -> None:
        try:
            while not self.stop.is_set():
                try:
                    index = self.work.get_nowait()
                except queue.Empty:
                    return
                with self.lock:
                    self.busy.add(index)
                result = sender.export(self.batches[index])
                with self.lock:
                    self.busy.discard(index)
                    self.acked[index] = result is SpanExportResult.SUCCESS
        finally:
            sender.shutdown()

    def in_flight(self) -> list[int]:
        with self.lock:
            return sorted(self.busy)

    def finish(self) -> tuple[list[int], list[int]]:
        """Stop taking batches, wait for the exports under way; (acked, not acked) export
        indexes. The exports done are always the first ones, in order."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=EXPORT_TIMEOUT + 30)
            assert not thread.is_alive(), "a sender is still exporting after its timeout"
        done = sorted(self.acked)
        assert done == list(range(len(done))), done
        return [i for i in done if self.acked[i]], [i for i in done if not self.acked[i]]


def admin_token(url: str) -> str:
    r = httpx.post(f"{url}/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD})
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def traced_agent(server: object, admin: str, workspace: str, name: str = "bot") -> str:
    """An agent with the OpenInference starter mapping on ``server`` (anything with a
    ``url``); returns an agent token for it."""
    make_agent(server, admin, workspace, name)
    return mint(server, admin, workspace, name)


def stored_counts(db_url: str, agent: str | None = None) -> Counter[Key]:
    """How many times each (trace id, span id) is stored (for the agent named, when one is:
    a span's identity is its agent's, trace and span ids)."""
    rows = query(
        db_url,
        "SELECT encode(s.trace_id, 'hex'), encode(s.span_id, 'hex'), count(*) FROM spans s "
        "JOIN agents a ON a.id = s.agent_id WHERE %s::text IS NULL OR a.name = %s "
        "GROUP BY 1, 2",
        (agent, agent),
    )
    return Counter({(t, s): n for t, s, n in rows})


def pending_traces(db_url: str) -> set[str]:
    """Traces the collector still holds waiting for their root span."""
    rows = query(
        db_url, "SELECT encode(trace_id, 'hex') FROM trace_sessions WHERE session_id IS NULL"
    )
    return {row[0] for row in rows}


def session_counts(db_url: str) -> dict[str, int]:
    return dict(query(db_url, "SELECT session_id, span_count FROM sessions"))  # type: ignore[arg-type]


def sessions_of(batches: list[list[ReadableSpan]]) -> set[str]:
    return {
        str(span.attributes["session.id"])
        for batch in batches
        for span in batch
        if span.attributes and "session.id" in span.attributes
    }
