"""A loopback OTLP/HTTP traces receiver, to record what a real instrumentation sends (for
fixtures under tests/frameworks/captured/, not for the framework tests themselves, which send
to the real edge).

    with Capture() as capture:            # binds 127.0.0.1 on a free port
        capture.endpoint                  # "http://127.0.0.1:PORT/v1/traces"
        ... run an agent exporting there ...
        capture.spans                     # evalkit Spans, in arrival order
    dump(capture.spans, path)

Each request is decoded with evalkit's own decoder (``decode_protobuf`` or ``decode_json`` by
its Content-Type; gzip and deflate bodies are inflated first) and its spans turned into
:class:`evalkit.otel.model.Span` as the server reads them back. ``python -m
tests.frameworks.capture PART SCRIPT OUT.json [KEY=VALUE ...]`` runs a part's script against
a capture and the fake model and writes what arrived.
"""

from __future__ import annotations

import gzip
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from evalkit.otel.model import Span, SpanEvent
from evalkit.otel.otlp import Decoded, NotTraces, attributes, decode_json, decode_protobuf

PATH = "/v1/traces"


def spans_of(decoded: Decoded) -> list[Span]:
    """The decoded request's spans as evalkit reads stored spans back."""
    out = []
    for inc in decoded.spans:
        message = inc.message
        out.append(
            Span(
                trace_id=inc.trace_id.hex(),
                span_id=inc.span_id.hex(),
                parent_span_id=inc.parent_span_id.hex() if inc.parent_span_id else None,
                name=inc.name,
                kind=inc.kind,
                start_ns=inc.start_ns,
                end_ns=inc.end_ns,
                attributes=attributes(message.attributes),
                events=[
                    SpanEvent(
                        name=e.name, time_ns=e.time_unix_nano, attributes=attributes(e.attributes)
                    )
                    for e in message.events
                ],
                status_code=inc.status_code,
                status_message=inc.status_message,
                resource=dict(inc.resource),
                scope=inc.scope,
            )
        )
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_chunked(self) -> bytes:
        """A ``Transfer-Encoding: chunked`` body, its chunks joined (trailers skipped)."""
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after the chunk

    def do_POST(self) -> None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = self._read_chunked()  # OTel JS's exporters send no Content-Length
        else:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
        if self.path.split("?")[0] != PATH:
            self._reply(404, b'{"error": "not the traces path"}', "application/json")
            return
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        is_json = content_type == "application/json"
        try:
            decoded = decode_json(body) if is_json else decode_protobuf(body)
        except NotTraces as exc:
            self.server.errors.append(str(exc))
            self._reply(400, str(exc).encode(), "text/plain")
            return
        with self.server.lock:
            self.server.requests.append(
                {"headers": dict(self.headers.items()), "content_type": content_type}
            )
            self.server.spans.extend(spans_of(decoded))
        if is_json:
            self._reply(200, b"{}", "application/json")
        else:
            response = ExportTraceServiceResponse().SerializeToString()
            self._reply(200, response, "application/x-protobuf")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: Capture) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = owner._lock
        self.spans = owner._spans
        self.requests = owner._requests
        self.errors = owner.errors


class Capture:
    """The receiver in a background thread; a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self._requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Capture:
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "the capture is not running"
        return f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Each export's headers and content type."""
        with self._lock:
            return list(self._requests)


def dump(spans: list[Span], path: str | Path) -> None:
    """Write spans as a JSON list of :class:`Span` (sorted by start time, then span id, so a
    re-recording diffs cleanly), formatted for review."""
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    Path(path).write_bytes(msgspec.json.format(msgspec.json.encode(ordered), indent=2) + b"\n")


def load(path: str | Path) -> list[Span]:
    return msgspec.json.decode(Path(path).read_bytes(), type=list[Span])


def _main(argv: list[str]) -> int:
    """Run a part's script (a venv part, or a node part: one with a package.json) against a
    capture and the fake model, and write the spans that arrived."""
    from tests.frameworks.fake_model import FakeModel
    from tests.frameworks.node import part_dir, run_node_agent
    from tests.frameworks.venvs import run_agent

    if len(argv) < 3:
        print(
            "usage: python -m tests.frameworks.capture PART SCRIPT OUT.json [KEY=VALUE ...]",
            file=sys.stderr,
        )
        return 2
    part, script, out, *pairs = argv
    extra = dict(pair.split("=", 1) for pair in pairs)
    with FakeModel() as model, Capture() as capture:
        env = {
            "EVALKIT_OTLP_ENDPOINT": capture.endpoint,
            "EVALKIT_AGENT_TOKEN": "capture-token",
            "EVALKIT_SESSION_ID": "captured-session",
            "FAKE_MODEL_URL": model.base_url,
            "FAKE_MODEL_STREAM": "0",
            **extra,
        }
        node = (part_dir(part) / "package.json").exists()
        done = (run_node_agent if node else run_agent)(part, script, env)
        spans = capture.spans
    print(done.stdout.strip())
    print(f"{len(spans)} spans, {len(model.requests)} model requests", file=sys.stderr)
    for err in capture.errors:
        print(f"refused: {err}", file=sys.stderr)
    dump(spans, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
