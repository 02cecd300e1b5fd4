"""Calls that arrive together, made as one: the worker's jobs share their database writes.

A worker's jobs run on one event loop. When several of them want the same kind of write at
about the same time (their runs ended in the same moment), :class:`Batcher` gives the
writes to one call of its ``flush`` function, which does them in one transaction with a
few statements for all, instead of a transaction and statements each. A call waits for no
timer: the first caller's flush starts at the loop's next turn, with every item asked for
by then, and items asked for while a flush runs go into the next one. So a lone caller
pays one turn of the loop, and a busy worker writes in larger batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("evalkit.jobs")


class Batcher(Generic[K, T, R]):
    """Items of one key, flushed together; ``flush(key, items)`` returns one result per item,
    in order. When a flush of several items raises, each item is flushed again alone, so
    that one bad item fails only its own caller."""

    def __init__(self, flush: Callable[[K, Sequence[T]], Awaitable[Sequence[R]]]) -> None:
        self._flush = flush
        self._waiting: dict[K, list[tuple[T, asyncio.Future[R]]]] = {}
        self._draining: dict[K, asyncio.Task[None]] = {}

    async def submit(self, key: K, item: T) -> R:
        """The result of ``item``, flushed with the other items of ``key`` asked for now."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((item, future))
        if key not in self._draining:
            self._draining[key] = asyncio.create_task(self._drain(key))
        return await future

    async def _drain(self, key: K) -> None:
        try:
            while batch := self._waiting.pop(key, None):
                await self._flush_batch(key, batch)
        finally:
            del self._draining[key]

    async def _flush_batch(self, key: K, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._flush(key, [item for item, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                _fail(batch[0][1], exc)
                return
            log.warning("a batch of %s failed (%s); flushing each item alone", len(batch), exc)
            for one in batch:
                await self._flush_batch(key, [one])
            return
        except BaseException:  # this task was cancelled: so are its callers' waits
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():  # done: its caller was cancelled, nothing to tell it
                future.set_result(result)


def _fail(future: asyncio.Future[R], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)
