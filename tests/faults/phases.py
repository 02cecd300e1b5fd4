"""Where a killed worker was: the requests it had open to the harnesses and the evaluator.

Every harness of the worker-kill soak is wrapped in :class:`Watched`, an ASGI layer that
notes each request the worker sends (start, status, stop, trajectory) in a shared
:class:`Requests` book, holds the harness's answer back for a while (so a kill can land
while the request is open) and then sends it. :class:`SlowEvaluator` is a Custom Evaluator
API server on loopback that does the same for the scoring calls. A request still open
when the worker dies is one the worker had sent and not heard back from: the kill landed
in that phase of the run.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.integration.judge_helpers import LoopbackServer

PHASES = ("start", "poll", "stop-grace", "settle", "scoring")
"""The phases of a run the worker-kill soak must kill the worker in, each at least once."""


@dataclass
class Open:
    """One request: who got it (``source``: an agent's name or ``evaluator``), what it is
    (``kind``: start, status, stop, trajectory, evaluate), its key (the harness run id, read
    from the answer for a start; the evalkit run id for the evaluator), and when it came and
    was answered (monotonic)."""

    id: int
    source: str
    kind: str
    key: str | None
    opened: float
    closed: float | None = None

    def open_at(self, moment: float) -> bool:
        return self.opened < moment and (self.closed is None or self.closed > moment)


class Requests:
    """The requests the harnesses and the evaluator got, shared across their threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._open: dict[int, Open] = {}
        self.calls: list[Open] = []
        """Every request, in arrival order."""

    def opened(self, source: str, kind: str, key: str | None) -> Open:
        with self._lock:
            req = Open(next(self._ids), source, kind, key, time.monotonic())
            self._open[req.id] = req
            self.calls.append(req)
            return req

    def closed(self, req: Open) -> None:
        with self._lock:
            req.closed = time.monotonic()
            self._open.pop(req.id, None)

    def now_open(self) -> list[Open]:
        with self._lock:
            return list(self._open.values())


def harness_request(method: str, path: str) -> tuple[str | None, str | None]:
    """(kind, harness run id) of a Harness API request; kind None for the others."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] != ["runs"]:
        return None, None
    if len(parts) == 1:
        return ("start" if method == "POST" else None), None
    if len(parts) == 2 and method == "GET":
        return "status", parts[1]
    if len(parts) == 3 and parts[2] in ("stop", "trajectory"):
        return parts[2], parts[1]
    return None, None


class Watched:
    """ASGI: note each Harness API request in ``book`` and hold its answer back for
    ``delays[kind]`` seconds after the harness has made it (what the harness did is done;
    the worker has not heard it yet)."""

    def __init__(self, app: Any, book: Requests, source: str, delays: dict[str, float]) -> None:
        self.app, self.book, self.source, self.delays = app, book, source, delays
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind, key = harness_request(scope["method"], scope["path"])
        if kind is None:
            await self.app(scope, receive, send)
            return
        req = self.book.opened(self.source, kind, key)
        held: list[dict[str, Any]] = []

        async def hold(message: dict[str, Any]) -> None:
            held.append(message)

        try:
            await self.app(scope, receive, hold)
            if kind == "start":
                req.key = started_run(held)
            await asyncio.sleep(self.delays.get(kind, 0.0))
            for message in held:
                await send(message)
        finally:
            self.book.closed(req)


def started_run(messages: list[dict[str, Any]]) -> str | None:
    """The harness run id in the answer to a POST /runs (None if it is not a run)."""
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    try:
        found = json.loads(body).get("id")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def watch(ref: Any, book: Requests, source: str, delays: dict[str, float]) -> Any:
    """Wrap a not yet started ReferenceHarness's app in :class:`Watched`; returns ``ref``."""
    ref.app = Watched(ref.app, book, source, delays)
    return ref


class SlowEvaluator(LoopbackServer):
    """A Custom Evaluator API server with one evaluator, ``grade``: 1 when the run's answer
    is the case's expected answer, else 0, answered after ``seconds``."""

    def __init__(self, book: Requests, seconds: float) -> None:
        self.book, self.seconds = book, seconds
        super().__init__(Starlette(routes=[Route("/grade", self._grade, methods=["POST"])]))

    @property
    def endpoint(self) -> str:
        return f"{self.url}/grade"

    async def _grade(self, request: Request) -> Response:
        body = json.loads(await request.body())
        req = self.book.opened("evaluator", "evaluate", str(body["run"]["id"]))
        try:
            await asyncio.sleep(self.seconds)
            expected = ((body["case"] or {}).get("expected") or {}).get("answer")
            right = body["run"]["answer"] is not None and body["run"]["answer"] == expected
            return JSONResponse({"scores": [{"name": "grade", "score": 1.0 if right else 0.0}]})
        finally:
            self.book.closed(req)
