"""The CLI's driver of the run state machine, for personal Harness API agents.

The server never calls a personal agent's harness; its owner's CLI does, on the owner's
machine, with the same :mod:`evalkit.runs.machine` steps the server's jobs take. Each
step's transition is posted to the server, which applies it by compare-and-set exactly
as it applies its own, so an interrupted ``evalkit run`` is continued with ``--resume``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import msgspec

from evalkit.errors import EvalkitError
from evalkit.harness.client import HarnessClient
from evalkit.model.harness import Capabilities
from evalkit.model.runs import TERMINAL, RunWork, Transition, TransitionResult, WorkList
from evalkit.runs import machine


class ServerError(EvalkitError):
    """The evalkit server refused or failed a call of the driver."""


def as_posted(transition: Transition) -> Transition:
    """``transition`` as the server's API takes it: a trajectory the harness client read as
    bytes goes as its text (``raw``), the form every server version reads."""
    record = transition.trajectory
    if record is None or record.received is None:
        return transition
    text = record.received.decode("utf-8", "replace")
    sent = msgspec.structs.replace(record, raw=text, received=None)
    return msgspec.structs.replace(transition, trajectory=sent)


class ServerLink:
    """The driver's calls to the evalkit server (async, with the caller's token)."""

    def __init__(self, base_url: str, token: str | None) -> None:
        headers = {"User-Agent": "evalkit-cli", "Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120.0)

    async def work(self, experiment_id: int) -> WorkList:
        response = await self._send("GET", f"/api/experiments/{experiment_id}/work")
        return msgspec.json.decode(response.content, type=WorkList)

    async def post(self, transition: Transition) -> TransitionResult:
        response = await self._send(
            "POST",
            f"/api/runs/{transition.run_id}/transition",
            content=msgspec.json.encode(as_posted(transition)),
        )
        return msgspec.json.decode(response.content, type=TransitionResult)

    async def fixture(self, sha256: str) -> bytes:
        return (await self._send("GET", f"/api/fixtures/{sha256}")).content

    async def _send(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        for attempt in range(5):
            try:
                response = await self.http.request(method, path, **kwargs)  # type: ignore[arg-type]
            except httpx.TransportError as exc:
                if attempt == 4:
                    server = str(self.http.base_url).rstrip("/")
                    raise ServerError(
                        f"the evalkit server at {server} did not answer {path} ({exc}); "
                        "check that it runs and that the address is right (EVALKIT_SERVER_URL, "
                        "else evalkit.yaml's server_url, else your last `evalkit login`)"
                    ) from None
                await asyncio.sleep(2**attempt)
                continue
            if response.status_code in (502, 503, 504) and attempt < 4:
                await asyncio.sleep(2**attempt)
                continue
            if response.status_code >= 400:
                raise ServerError(f"{method} {path}: {_message(response)}")
            return response
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self.http.aclose()


def _message(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['message']} [{error['code']}]"
    except (ValueError, KeyError, TypeError):
        return f"the server answered {response.status_code}: {response.text[:200]}"


async def drive_experiment(
    link: ServerLink,
    experiment_id: int,
    harness: HarnessClient,
    capabilities: Capabilities,
    *,
    concurrency: int,
    attempts: int = 5,
    backoff: float = 1.0,
    on_run_end: Callable[[RunWork], None] | None = None,
) -> int:
    """Drive every live run of the experiment to a terminal state; return how many."""
    work = await link.work(experiment_id)
    env = machine.Env(
        harness=harness,
        capabilities=capabilities,
        fixture_bytes=link.fixture,
        attempts=attempts,
        backoff=backoff,
    )
    slots = asyncio.Semaphore(max(concurrency, 1))

    async def one(run: RunWork) -> None:
        async with slots:
            final = await _drive_run(link, run, env)
        if on_run_end is not None and final is not None:
            on_run_end(final)

    await asyncio.gather(*(one(run) for run in work.runs))
    return len(work.runs)


async def _drive_run(link: ServerLink, run: RunWork, env: machine.Env) -> RunWork | None:
    if run.state == "queued":
        claimed = await _record(link, machine.claim(run))
        if claimed is None:
            return None
        run = machine.advance(run, claimed)
    while run.state not in TERMINAL:
        step = await machine.step(run, env)
        if step.handoff:
            return run  # the server builds its trajectory from traces and finishes it
        if step.transition is not None:
            if await _record(link, step.transition) is None:
                return None  # moved on elsewhere (another `evalkit run --resume`)
            run = machine.advance(run, step.transition)
        if step.wait > 0 and run.state not in TERMINAL:
            await asyncio.sleep(step.wait)
    return run


async def _record(link: ServerLink, transition: Transition) -> Transition | None:
    result = await link.post(transition)
    return transition if result.applied else None
