"""Group commit for run steps: the steps and scores that runs post while a request is in
flight go together in the next one (``POST /api/experiments/{id}/sdk-steps``), so an
instant task costs a fraction of a round trip per step, and nothing waits on a timer.

Up to :data:`IN_FLIGHT` requests go at once, so that the server works on one batch while
this process prepares the next. A run's steps stay in order because a run never has two
items queued or in flight: each caller waits for its item (or takes it back) before it
posts the run's next step. A request that fails fails its own items, whose callers see
the error; the others go on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from evalkit.model.runs import Transition
from evalkit.model.sdk import PythonScore, RunScores, SdkBatch, SdkBatchResult
from evalkit.sdk._link import SdkLink

MAX_ITEMS = 256
MAX_BYTES = 16 * 2**20
"""A request's trajectories, roughly: a larger one goes alone."""
IN_FLIGHT = 2
"""Requests at once (each a transaction on the server)."""


@dataclass
class _Item:
    run_id: int
    steps: list[Transition]
    scores: list[PythonScore]
    done: asyncio.Future[list[bool]]
    size: int = field(default=0)


class StepBatcher:
    def __init__(self, link: SdkLink, experiment_id: int) -> None:
        self.link = link
        self.path = f"/api/experiments/{experiment_id}/sdk-steps"
        self.queue: list[_Item] = []
        self.senders: set[asyncio.Task[None]] = set()
        self.requests = 0

    async def send(
        self, run_id: int, steps: list[Transition], scores: list[PythonScore] | None = None
    ) -> list[bool]:
        """Record ``steps`` of one run (in order) and then its Python ``scores``; returns
        whether each step was applied."""
        return await self.enqueue(run_id, steps, scores).done

    def enqueue(
        self, run_id: int, steps: list[Transition], scores: list[PythonScore] | None = None
    ) -> _Item:
        """:meth:`send` without waiting: the item's ``done`` tells how it went, unless it is
        taken back with :meth:`withdraw` before it leaves."""
        size = sum(len(s.trajectory.raw or "") for s in steps if s.trajectory is not None)
        done: asyncio.Future[list[bool]] = asyncio.get_running_loop().create_future()
        item = _Item(run_id, steps, scores or [], done, size)
        self.queue.append(item)
        self.senders = {sender for sender in self.senders if not sender.done()}
        if len(self.senders) < IN_FLIGHT:
            self.senders.add(asyncio.create_task(self._drain()))
        return item

    def withdraw(self, item: _Item) -> bool:
        """Take back ``item`` if no request has carried it yet (True): a step the run has
        already gone past (a task that ended before its step to running left) goes as part
        of the next one instead of costing the server an update of its own."""
        for position, queued in enumerate(self.queue):
            if queued is item:
                del self.queue[position]
                item.done.cancel()
                return True
        return False

    async def _drain(self) -> None:
        while self.queue:
            batch, size = [], 0
            while self.queue and len(batch) < MAX_ITEMS:
                item = self.queue[0]
                if batch and size + item.size > MAX_BYTES:
                    break
                batch.append(self.queue.pop(0))
                size += item.size
            body = SdkBatch(
                steps=[step for item in batch for step in item.steps],
                scores=[RunScores(run_id=i.run_id, scores=i.scores) for i in batch if i.scores],
            )
            try:
                self.requests += 1
                result: SdkBatchResult = await self.link.post_json(self.path, body, SdkBatchResult)
            except BaseException as exc:
                for item in batch:
                    if not item.done.done():
                        item.done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            position = 0
            for item in batch:
                flags = result.applied[position : position + len(item.steps)]
                position += len(item.steps)
                if not item.done.done():
                    item.done.set_result(flags)
