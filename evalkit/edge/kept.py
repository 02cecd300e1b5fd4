"""Answers kept in the server's memory by key, for reads that are slow to make.

A key must change whenever its answer would (the reads here key on score versions: scores
are only ever inserted). Callers asking for one key at once share one making of it; a
making that fails is not kept; the newest ``size`` answers are kept."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class KeptAnswers:
    def __init__(self, size: int) -> None:
        self.size = size
        self._tasks: OrderedDict[Hashable, asyncio.Future[Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Hashable]:
        """The keys, oldest asked first."""
        return iter(self._tasks)

    async def get(self, key: Hashable, make: Callable[[], Awaitable[T]]) -> T:
        """The answer for ``key``, made by ``make`` when it is not kept (or failed)."""
        tasks = self._tasks
        task = tasks.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(make())
            tasks[key] = task

            def forget_failure(done: asyncio.Future[Any]) -> None:
                if (done.cancelled() or done.exception() is not None) and tasks.get(key) is done:
                    del tasks[key]

            task.add_done_callback(forget_failure)
            while len(tasks) > self.size:
                tasks.popitem(last=False)
        tasks.move_to_end(key)
        return await asyncio.shield(task)  # type: ignore[no-any-return]
