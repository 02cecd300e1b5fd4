"""The worker's batches: what is asked for together is flushed together, what is asked for
during a flush goes into the next one, and a bad item fails only its own caller."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from evalkit.jobs.batch import Batcher


class Recorder:
    """A flush that records the batches it was given and answers each item doubled; it
    refuses any batch that holds a negative number, and can be held until released."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, key: str, items: Sequence[int]) -> list[int]:
        self.batches.append((key, list(items)))
        await self.release.wait()
        if any(item < 0 for item in items):
            raise ValueError(f"negative item in {list(items)}")
        return [item * 2 for item in items]


async def test_items_asked_for_together_are_one_flush_per_key():
    flush = Recorder()
    batcher = Batcher(flush)
    results = await asyncio.gather(
        batcher.submit("a", 1), batcher.submit("b", 10), batcher.submit("a", 2)
    )
    assert results == [2, 20, 4]
    assert sorted(flush.batches) == [("a", [1, 2]), ("b", [10])]


async def test_items_asked_for_during_a_flush_go_into_the_next_one():
    flush = Recorder()
    flush.release.clear()
    batcher = Batcher(flush)
    first = asyncio.ensure_future(batcher.submit("a", 1))
    while not flush.batches:
        await asyncio.sleep(0)
    later = [asyncio.ensure_future(batcher.submit("a", n)) for n in (2, 3)]
    for _ in range(10):  # turns of the loop in which a second flush would have started
        await asyncio.sleep(0)
    assert flush.batches == [("a", [1])]  # the first flush is still running
    flush.release.set()
    assert [await first, *[await f for f in later]] == [2, 4, 6]
    assert flush.batches == [("a", [1]), ("a", [2, 3])]


async def test_a_bad_item_fails_only_its_own_caller():
    flush = Recorder()
    batcher = Batcher(flush)
    every = asyncio.gather(
        batcher.submit("a", 1),
        batcher.submit("a", -1),
        batcher.submit("a", 3),
        return_exceptions=True,
    )
    # A caller the batcher forgot would wait for ever: the bound makes that a failure.
    good, bad, other = await asyncio.wait_for(every, timeout=10)
    assert (good, other) == (2, 6)
    assert isinstance(bad, ValueError) and "negative item in [-1]" in str(bad)
    # The batch of three failed, then each item was flushed alone.
    assert flush.batches == [("a", [1, -1, 3]), ("a", [1]), ("a", [-1]), ("a", [3])]


async def test_a_cancelled_caller_leaves_the_others_their_results():
    flush = Recorder()
    flush.release.clear()
    batcher = Batcher(flush)
    leaving = asyncio.ensure_future(batcher.submit("a", 1))
    staying = asyncio.ensure_future(batcher.submit("a", 2))
    while not flush.batches:
        await asyncio.sleep(0)
    leaving.cancel()
    flush.release.set()
    assert await staying == 4
    with pytest.raises(asyncio.CancelledError):
        await leaving
    # A new item after the drain finished starts a new flush.
    assert await batcher.submit("a", 5) == 10
