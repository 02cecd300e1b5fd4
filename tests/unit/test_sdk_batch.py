"""The SDK's step batcher with two requests in flight: each request answers for its own
items, in order, and a request the server refuses fails only its items; nothing queued is
left behind."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from evalkit.model.runs import Transition
from evalkit.sdk._batch import IN_FLIGHT, StepBatcher
from evalkit.sdk._link import SdkLink, ServerError


def claim(run_id: int) -> Transition:
    return Transition(run_id=run_id, from_state="queued", to_state="starting")


def report(run_id: int) -> list[Transition]:
    return [
        Transition(run_id=run_id, from_state="starting", to_state="collecting"),
        Transition(run_id=run_id, from_state="collecting", to_state="scoring"),
    ]


class Server:
    """Answers sdk-steps the way the edge does (one flag per step, here: applied unless
    the run is odd and the step is a claim), holding the first request until a second one
    is in flight, and refusing the first when told to."""

    def __init__(self, refuse_first: bool) -> None:
        self.refuse_first = refuse_first
        self.bodies: list[list[tuple[int, str]]] = []
        self.second_arrived = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        steps = [(s["run_id"], s["to_state"]) for s in body["steps"]]
        self.bodies.append(steps)
        if len(self.bodies) == 1:
            await asyncio.wait_for(self.second_arrived.wait(), 5)
            if self.refuse_first:
                error = {"code": "no-such-run", "message": "run 1 is no run of experiment 7"}
                return httpx.Response(400, json={"error": error})
        else:
            self.second_arrived.set()
        applied = [not (run % 2 and to == "starting") for run, to in steps]
        return httpx.Response(200, json={"applied": applied, "states": {}, "scored": []})


async def drive(server: Server) -> tuple[StepBatcher, list[object]]:
    link = SdkLink("http://evalkit.test", "token")
    link.http = httpx.AsyncClient(
        base_url="http://evalkit.test", transport=httpx.MockTransport(server)
    )
    batcher = StepBatcher(link, 7)
    try:
        first = asyncio.ensure_future(batcher.send(1, [claim(1)]))
        await asyncio.sleep(0)  # the first request leaves alone
        later = [
            asyncio.ensure_future(batcher.send(2, report(2))),
            asyncio.ensure_future(batcher.send(3, [claim(3)])),
            asyncio.ensure_future(batcher.send(4, report(4))),
        ]
        outcomes = await asyncio.gather(first, *later, return_exceptions=True)
    finally:
        await link.aclose()
    return batcher, list(outcomes)


def test_two_requests_in_flight_each_answer_for_their_own_steps():
    assert IN_FLIGHT == 2
    server = Server(refuse_first=False)
    batcher, outcomes = asyncio.run(drive(server))
    assert outcomes == [[False], [True, True], [False], [True, True]]
    assert server.bodies == [
        [(1, "starting")],
        [(2, "collecting"), (2, "scoring"), (3, "starting"), (4, "collecting"), (4, "scoring")],
    ]
    assert batcher.requests == 2 and batcher.queue == []


def test_a_refused_request_fails_its_own_steps_only():
    server = Server(refuse_first=True)
    batcher, outcomes = asyncio.run(drive(server))
    assert isinstance(outcomes[0], ServerError)
    assert "no-such-run" in str(outcomes[0])
    assert outcomes[1:] == [[True, True], [False], [True, True]]
    assert batcher.queue == []


@pytest.mark.parametrize("refuse_first", [False, True])
def test_every_step_is_sent_once(refuse_first):
    server = Server(refuse_first=refuse_first)
    asyncio.run(drive(server))
    sent = [step for body in server.bodies for step in body]
    assert sorted(sent) == sorted({*sent})
    assert {run for run, _ in sent} == {1, 2, 3, 4}
