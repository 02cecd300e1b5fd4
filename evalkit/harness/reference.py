"""A reference Harness API v1 server: a real HTTP harness around a deterministic agent.

Users try evalkit against it (``evalkit harness example``), and the tests and benchmarks
drive runs through it. :class:`Behaviour` turns it into a misbehaving harness (slow, hangs,
5xx, garbage, invalid ATIF, ignores stop, lies about its capabilities, fails every run),
and :class:`Counters` records what it received, so tests can see what evalkit did.

Per request it does little: look a run up in a dict, compute its status from the clock,
encode with msgspec. Nothing it answers is validated on the way out.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import heapq
import hmac
import itertools
import logging
import math
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalkit.asgi_server import serve_asgi
from evalkit.errors import EvalkitError
from evalkit.harness import _agent
from evalkit.harness._agent import ReadFile, Work
from evalkit.model.harness import (
    ACCEPTS,
    PROVIDES,
    Accepts,
    Capabilities,
    InputFile,
    Provides,
    RunStart,
    RunStatus,
)
from evalkit.model.names import whole_number

log = logging.getLogger("evalkit.harness.reference")

ENDPOINT_NAMES = (
    "capabilities",
    "start",
    "status",
    "stop",
    "trajectory",
    "list",
    "workspace",
    "workspace_file",
)
"""The names :class:`Behaviour` and :class:`Counters` use for the endpoints."""

LISTING_PAGE = 100
MAX_FILE_BYTES = 64 * 2**20


@dataclass
class Behaviour:
    """How the reference harness behaves. The default is an honest, instant harness."""

    run_seconds: float = 0.0
    """Seconds from start until a run reaches its final status (0: final at once;
    ``math.inf``: never, until stopped)."""
    stop_seconds: float = 0.0
    """Seconds from a stop request until the run reports ``stopped``."""
    fail_first: dict[str, int] = field(default_factory=dict)
    """Endpoint name -> how many of its first calls answer 503."""
    hang_first: dict[str, int] = field(default_factory=dict)
    """Endpoint name -> how many of its first calls never answer (until the harness stops).
    A hanging POST /runs has started the run before it hangs, as a harness whose answer
    was lost would have."""
    garbage_status: bool = False
    """GET /runs/{id} answers 200 with a body that is not JSON."""
    invalid_trajectory: bool = False
    """GET /runs/{id}/trajectory answers JSON that breaks ATIF rules."""
    ignore_stop: bool = False
    """POST /runs/{id}/stop answers 200 but the run keeps going."""
    lie: bool = False
    """Declare stop, trajectory and run_listing, but answer those endpoints 501 / 404."""
    fail_runs: bool = False
    """Every run ends ``failed`` with an error."""
    nul_in_answer: bool = False
    """Every answer ends with a NUL character (U+0000), in the run's status and its
    trajectory alike, as a harness passing on a tool's binary output would."""
    without: frozenset[str] = frozenset()
    """Capabilities (names from ``ACCEPTS`` and ``PROVIDES``) this harness honestly lacks:
    not declared, and the matching endpoint or field is refused."""

    def __post_init__(self) -> None:
        unknown = (set(self.fail_first) | set(self.hang_first)) - set(ENDPOINT_NAMES)
        if unknown:
            raise ValueError(f"unknown endpoint names {sorted(unknown)}; use {ENDPOINT_NAMES}")
        bad = set(self.without) - set(ACCEPTS) - set(PROVIDES)
        if bad:
            raise ValueError(f"unknown capabilities {sorted(bad)}")


@dataclass
class Counters:
    """What the harness received. Read them from tests; they only ever grow."""

    calls: Counter[str] = field(default_factory=Counter)
    """Requests per endpoint name (every request, refused ones included)."""
    starts: Counter[str] = field(default_factory=Counter)
    """POST /runs requests per ``evalkit_run_id`` (1 each if evalkit never retried)."""
    stops: Counter[str] = field(default_factory=Counter)
    """POST /runs/{id}/stop requests per harness run id."""
    runs_created: int = 0
    """Runs actually started (the idempotency key keeps this at one per evalkit run)."""
    max_live: int = 0
    """The most runs that were live (not final) at the same moment."""


@dataclass(slots=True)
class _Run:
    id: str
    evalkit_run_id: str
    seq: int
    start: float
    """time.time() at start."""
    deadline: float
    """time.time() when the run becomes final by itself (inf: never)."""
    work: Work
    model: str | None
    error: str | None = None
    stop_final: float = math.inf
    """time.time() when a stop makes the run final."""
    received: list[InputFile] = field(default_factory=list)
    """The input files as the start named them (with their context), for tests to read."""

    def final_at(self) -> float:
        return min(self.deadline, self.stop_final)

    def status(self, now: float) -> RunStatus:
        stopped = self.stop_final <= now and self.stop_final < self.deadline
        if stopped:
            value = "stopped"
        elif self.deadline <= now:
            value = "failed" if self.error else "succeeded"
        else:
            value = "running"
        final = value != "running"
        return RunStatus(
            id=self.id,
            status=value,  # type: ignore[arg-type]
            answer=self.work.answer if value == "succeeded" else None,
            output=self.work.output if value == "succeeded" else None,
            error=self.error if value == "failed" else None,
            session_id=self.id,
            started_at=_agent.iso(self.start),
            finished_at=_agent.iso(self.final_at()) if final else None,
        )

    def workspace(self, now: float) -> dict[str, bytes]:
        files = {f"inputs/{f.name}": f.content for f in self.work.files}
        if self.status(now).status == "succeeded":
            files["answer.txt"] = self.work.answer.encode()
        return files


class _Refusal(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_encode = msgspec.json.Encoder().encode
_start_decoder = msgspec.json.Decoder(RunStart)


def _json(value: Any, status: int = 200) -> Response:
    return Response(_encode(value), status, media_type="application/json")


def _error(status: int, code: str, message: str) -> Response:
    return _json({"error": {"code": code, "message": message}}, status)


class HarnessState:
    """The runs and counters of one reference harness, touched only from its event loop."""

    def __init__(self, behaviour: Behaviour, api_key: str | None) -> None:
        self.behaviour = behaviour
        self.api_key = api_key
        self.counters = Counters()
        self.runs: dict[str, _Run] = {}
        self.by_evalkit_id: dict[str, _Run] = {}
        self.order: list[_Run] = []
        self._ids = itertools.count(1)
        self._live: set[str] = set()
        self._finals: list[tuple[float, str]] = []
        self.closing = asyncio.Event()
        self.http: httpx.AsyncClient | None = None
        lacks = behaviour.without
        accepts = {name: name not in lacks for name in ACCEPTS}
        provides = {name: name not in lacks for name in PROVIDES}
        provides["artifacts"] = False
        if behaviour.lie:
            accepts["stop"] = provides["trajectory"] = provides["run_listing"] = True
        self.capabilities = Capabilities(
            name=_agent.AGENT_NAME,
            version="1",
            accepts=Accepts(**accepts),
            provides=Provides(**provides),
        )
        # api_version is a default, so omit_defaults would leave it out: say it anyway.
        self._capabilities_body = _encode(
            {"api_version": self.capabilities.api_version, **msgspec.to_builtins(self.capabilities)}
        )

    # --- live-run bookkeeping ------------------------------------------------------

    def _settle(self, now: float) -> None:
        finals = self._finals
        while finals and finals[0][0] <= now:
            _, run_id = heapq.heappop(finals)
            if run_id in self._live and self.runs[run_id].final_at() <= now:
                self._live.discard(run_id)

    def live_count(self) -> int:
        self._settle(time.time())
        return len(self._live)

    def _track(self, run: _Run, now: float) -> None:
        self._settle(now)
        if run.final_at() > now:
            self._live.add(run.id)
            if run.final_at() < math.inf:
                heapq.heappush(self._finals, (run.final_at(), run.id))
        self.counters.max_live = max(self.counters.max_live, len(self._live))

    # --- requests ------------------------------------------------------------------

    async def enter(self, request: Request, name: str) -> int:
        """Count, authenticate, then play the configured failures for ``name``; returns
        which call of ``name`` this is (1 for the first)."""
        self.counters.calls[name] += 1
        call_no = self.counters.calls[name]
        if self.api_key is not None:
            header = request.headers.get("authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), self.api_key.encode()
            ):
                raise _Refusal(
                    401, "unauthorized", "send Authorization: Bearer <the harness API key>"
                )
        b = self.behaviour
        if call_no <= b.fail_first.get(name, 0):
            raise _Refusal(503, "unavailable", f"{name}: failing on purpose (fail_first)")
        # A hanging start hangs after starting the run (see the start handler).
        if name != "start" and call_no <= b.hang_first.get(name, 0):
            await self.hang()
        return call_no

    async def hang(self) -> None:
        await self.closing.wait()
        raise _Refusal(503, "shutting-down", "the harness is stopping")

    def run(self, run_id: str) -> _Run:
        run = self.runs.get(run_id)
        if run is None:
            raise _Refusal(404, "no-such-run", f"no run {run_id!r} on this harness")
        return run

    async def start(self, body: RunStart) -> tuple[_Run, bool]:
        """The run for ``body.evalkit_run_id``: the existing one, or a new one."""
        self.counters.starts[body.evalkit_run_id] += 1
        existing = self.by_evalkit_id.get(body.evalkit_run_id)
        if existing is not None:
            return existing, False
        error = None
        try:
            files = await self._read_files(body.files)
        except _Refusal as exc:
            if exc.status != 422:
                raise
            files, error = [], exc.message
        existing = self.by_evalkit_id.get(body.evalkit_run_id)
        if existing is not None:  # a concurrent duplicate won while we downloaded
            return existing, False
        now = time.time()
        seq = next(self._ids)
        b = self.behaviour
        if b.fail_runs and error is None:
            error = "the reference harness fails every run (Behaviour.fail_runs)"
        work = _agent.solve(body.input, files)
        if b.nul_in_answer:
            work.answer += "\x00"
        run = _Run(
            id=f"ref-{seq:06d}",
            evalkit_run_id=body.evalkit_run_id,
            seq=seq,
            start=now,
            deadline=now + b.run_seconds,
            work=work,
            model=body.model,
            error=error,
            received=list(body.files),
        )
        self.runs[run.id] = run
        self.by_evalkit_id[run.evalkit_run_id] = run
        self.order.append(run)
        self.counters.runs_created += 1
        self._track(run, now)
        return run, True

    async def _read_files(self, files: list[InputFile]) -> list[ReadFile]:
        """Decode or download each file and check it; a file that does not match its
        sha256 or size fails the run (422 internally), a malformed request is 400."""
        read: list[ReadFile] = []
        lacks = self.behaviour.without
        for f in files:
            if (f.content_base64 is None) == (f.url is None):
                raise _Refusal(
                    400, "bad-file", f"file {f.name!r}: set exactly one of content_base64 and url"
                )
            if f.url is not None:
                if "file_urls" in lacks:
                    raise _Refusal(
                        400, "file-urls-unsupported", "this harness does not accept file URLs"
                    )
                content = await self._download(f)
            else:
                if "files" in lacks:
                    raise _Refusal(
                        400, "files-unsupported", "this harness does not accept inline files"
                    )
                try:
                    content = base64.b64decode(f.content_base64 or "", validate=True)
                except binascii.Error:
                    raise _Refusal(
                        400, "bad-file", f"file {f.name!r}: content_base64 is not base64"
                    ) from None
            digest = hashlib.sha256(content).hexdigest()
            if digest != f.sha256 or len(content) != f.size:
                raise _Refusal(
                    422,
                    "file-mismatch",
                    f"file {f.name!r}: got {len(content)} bytes with sha256 {digest}, "
                    f"expected {f.size} bytes with sha256 {f.sha256}",
                )
            read.append(ReadFile(f.name, len(content), digest, content))
        return read

    async def _download(self, f: InputFile) -> bytes:
        if self.http is None:
            self.http = httpx.AsyncClient(timeout=30.0, follow_redirects=True)
        try:
            async with self.http.stream("GET", f.url or "") as resp:
                if resp.status_code != 200:
                    raise _Refusal(
                        422,
                        "file-download",
                        f"file {f.name!r}: downloading {f.url} answered {resp.status_code}",
                    )
                chunks, size = [], 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_FILE_BYTES:
                        raise _Refusal(422, "file-download", f"file {f.name!r} is too large")
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.HTTPError as exc:
            raise _Refusal(
                422, "file-download", f"file {f.name!r}: cannot download {f.url} ({exc})"
            ) from None

    def stop(self, run: _Run) -> RunStatus:
        self.counters.stops[run.id] += 1
        now = time.time()
        if not self.behaviour.ignore_stop and run.final_at() > now:
            run.stop_final = now + self.behaviour.stop_seconds
            if run.stop_final > now:
                heapq.heappush(self._finals, (run.stop_final, run.id))
            else:
                self._live.discard(run.id)
        return run.status(now)

    def listing(self, cursor: str | None, limit: int) -> dict[str, Any]:
        start = 0
        if cursor:
            if whole_number(cursor) is None:
                raise _Refusal(400, "bad-cursor", f"cursor {cursor!r} is not one this harness gave")
            start = int(cursor)
        now = time.time()
        page = self.order[start : start + limit]
        more = start + limit < len(self.order)
        return {
            "runs": [r.status(now) for r in page],
            "next_cursor": str(start + limit) if more else None,
        }

    def trajectory(self, run: _Run) -> bytes:
        if self.behaviour.invalid_trajectory:
            return _encode(_agent.broken_trajectory(run.id))
        now = time.time()
        status = run.status(now)
        final = status.status != "running"
        doc = _agent.trajectory(
            run.work,
            session_id=run.id,
            model=run.model,
            started=run.start,
            finished=run.final_at() if final else None,
            outcome=status.status,
            error=run.error,
            thinking="thinking" not in self.behaviour.without,
            token_usage="token_usage" not in self.behaviour.without,
        )
        return _encode(doc)


def create_app(behaviour: Behaviour | None = None, api_key: str | None = None) -> Starlette:
    """The Starlette app of one reference harness; ``app.state.harness`` is its state."""
    state = HarnessState(behaviour or Behaviour(), api_key)
    b = state.behaviour
    lacks = b.without

    def endpoint(
        name: str, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            try:
                request.state.call_no = await state.enter(request, name)
                return await handler(request)
            except _Refusal as exc:
                return _error(exc.status, exc.code, exc.message)

        return serve

    def missing(what: str) -> _Refusal:
        return _Refusal(404, "not-supported", f"this harness does not provide {what}")

    async def capabilities(request: Request) -> Response:
        return Response(state._capabilities_body, media_type="application/json")

    async def start(request: Request) -> Response:
        try:
            body = _start_decoder.decode(await request.body())
        except msgspec.DecodeError as exc:
            raise _Refusal(400, "bad-body", f"the body is not a RunStart: {exc}") from None
        run, created = await state.start(body)
        if request.state.call_no <= b.hang_first.get("start", 0):
            await state.hang()
        return _json(run.status(time.time()), 201 if created else 200)

    async def status(request: Request) -> Response:
        run = state.run(request.path_params["run_id"])
        if b.garbage_status:
            return Response(b"<html><body>502 upstream hiccup</body></html>", 200)
        return _json(run.status(time.time()))

    async def stop(request: Request) -> Response:
        if b.lie:
            return _error(501, "not-implemented", "stop is not implemented")
        if "stop" in lacks:
            raise missing("stop")
        run = state.run(request.path_params["run_id"])
        result = state.stop(run)
        return _json(result, 202 if result.status == "running" else 200)

    async def trajectory(request: Request) -> Response:
        if b.lie or "trajectory" in lacks:
            raise missing("trajectories")
        run = state.run(request.path_params["run_id"])
        return Response(state.trajectory(run), media_type="application/json")

    async def listing(request: Request) -> Response:
        if b.lie or "run_listing" in lacks:
            raise missing("a run listing")
        limit_text = request.query_params.get("limit", "")
        limit = whole_number(limit_text) or LISTING_PAGE
        return _json(state.listing(request.query_params.get("cursor"), min(limit, 1000)))

    async def workspace(request: Request) -> Response:
        if "workspace" in lacks:
            raise missing("workspace files")
        run = state.run(request.path_params["run_id"])
        files = run.workspace(time.time())
        return _json({"files": [{"path": p, "size": len(c)} for p, c in sorted(files.items())]})

    async def workspace_file(request: Request) -> Response:
        if "workspace" in lacks:
            raise missing("workspace files")
        run = state.run(request.path_params["run_id"])
        path = request.path_params["path"]
        content = run.workspace(time.time()).get(path)
        if content is None:
            raise _Refusal(404, "no-such-file", f"run {run.id} has no workspace file {path!r}")
        return Response(content, media_type="application/octet-stream")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            state.closing.set()
            if state.http is not None:
                await state.http.aclose()

    routes = [
        Route("/capabilities", endpoint("capabilities", capabilities), methods=["GET"]),
        Route("/runs", endpoint("start", start), methods=["POST"]),
        Route("/runs", endpoint("list", listing), methods=["GET"]),
        Route("/runs/{run_id}", endpoint("status", status), methods=["GET"]),
        Route("/runs/{run_id}/stop", endpoint("stop", stop), methods=["POST"]),
        Route("/runs/{run_id}/trajectory", endpoint("trajectory", trajectory), methods=["GET"]),
        Route("/runs/{run_id}/workspace", endpoint("workspace", workspace), methods=["GET"]),
        Route(
            "/runs/{run_id}/workspace/{path:path}",
            endpoint("workspace_file", workspace_file),
            methods=["GET"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.harness = state
    return app


def listen(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket (port 0: a free one picked by the kernel, without a race)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EvalkitError(f"cannot listen on {host}:{port} ({exc.strerror})") from None
    sock.listen(1024)
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


async def serve(
    app: Starlette, sock: socket.socket, shutdown: Callable[[], Awaitable[Any]]
) -> None:
    """Serve ``app`` on ``sock`` (taken over) until ``shutdown`` returns."""
    await serve_asgi(app, sock, shutdown, keep_alive_seconds=30, graceful_seconds=2)


class ReferenceHarness:
    """The reference harness on 127.0.0.1 (a free port) in a background thread.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. ``url`` is the
    base URL to give evalkit as the agent's harness URL; ``counters`` shows what it got.
    """

    def __init__(
        self,
        behaviour: Behaviour | None = None,
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.app = create_app(behaviour, api_key)
        self.state: HarnessState = self.app.state.harness
        self.host, self.port = host, port
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def behaviour(self) -> Behaviour:
        return self.state.behaviour

    @property
    def counters(self) -> Counters:
        return self.state.counters

    def run_for(self, evalkit_run_id: str) -> RunStatus | None:
        """The harness's view of the run started for ``evalkit_run_id`` (None: never)."""
        run = self.state.by_evalkit_id.get(evalkit_run_id)
        return None if run is None else run.status(time.time())

    def files_for(self, evalkit_run_id: str) -> list[InputFile]:
        """The input files the start of ``evalkit_run_id`` sent, as sent."""
        run = self.state.by_evalkit_id.get(evalkit_run_id)
        return [] if run is None else run.received

    def live_runs(self) -> int:
        return self.state.live_count()

    def start(self, timeout: float = 10) -> ReferenceHarness:
        sock = listen(self.host, self.port)
        self.url = base_url(sock)
        ready = threading.Event()

        async def main() -> None:
            self._loop, self._shutdown = asyncio.get_running_loop(), asyncio.Event()
            ready.set()
            await serve(self.app, sock, self._shutdown.wait)

        def thread_main() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:
                self._error = exc
                ready.set()

        self._thread = threading.Thread(target=thread_main, name="reference-harness", daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or self._error is not None:
            raise EvalkitError(f"the reference harness did not start: {self._error}")
        return self

    def stop(self, timeout: float = 10) -> None:
        if self._thread is None:
            return
        loop, shutdown = self._loop, self._shutdown
        if loop is not None and shutdown is not None and self._thread.is_alive():

            def close() -> None:
                self.state.closing.set()
                shutdown.set()

            loop.call_soon_threadsafe(close)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise EvalkitError(f"the reference harness did not stop within {timeout:.0f} s")
        self._thread = None

    def __enter__(self) -> ReferenceHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
