"""GroupCommit: writes of one key that arrive while one is under way are written together,
and each gets its own answer (or its group's failure)."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.edge.group_commit import GroupCommit
from evalkit.errors import DatabaseError


class Writer:
    """Records each group it is called with; a group waits on ``gate`` until it is set."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def __call__(self, items: list[str]) -> list[str]:
        self.groups.append(list(items))
        number = len(self.groups)
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [f"{item} written in group {number}" for item in items]


async def answer(task: asyncio.Task[str]) -> str:
    """The task's answer; a write nobody answers fails the test, not hangs it."""
    return await asyncio.wait_for(task, 5)


async def settle() -> None:
    """Until every task that can run has run as far as it can."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_write_alone_starts_at_once() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10)
    writer = Writer()
    assert await groups.write("agent", "a", 1, writer) == "a written in group 1"
    assert await groups.write("agent", "b", 1, writer) == "b written in group 2"
    assert writer.groups == [["a"], ["b"]]


async def test_writes_arriving_during_a_write_are_written_together_in_order() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10)
    writer = Writer()
    writer.gate.clear()
    first = asyncio.create_task(groups.write("agent", "a", 1, writer))
    await settle()
    rest = [asyncio.create_task(groups.write("agent", item, 1, writer)) for item in "bcd"]
    other_key = asyncio.create_task(groups.write("other", "x", 1, writer))
    await settle()
    assert writer.groups == [["a"], ["x"]]  # another key does not wait
    writer.gate.set()
    assert await first == "a written in group 1"
    assert [await answer(task) for task in rest] == [f"{i} written in group 3" for i in "bcd"]
    assert await other_key == "x written in group 2"
    assert writer.groups == [["a"], ["x"], ["b", "c", "d"]]


async def test_a_group_weighs_at_most_the_cap() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=5)
    writer = Writer()
    writer.gate.clear()
    tasks = [asyncio.create_task(groups.write("agent", "a", 1, writer))]
    await settle()
    for item, weight in [("b", 3), ("c", 2), ("d", 1), ("e", 9)]:
        tasks.append(asyncio.create_task(groups.write("agent", item, weight, writer)))
    await settle()
    writer.gate.set()
    await asyncio.gather(*tasks)
    # b and c weigh 5; d does not fit beside them; e, heavier than the cap, goes alone
    assert writer.groups == [["a"], ["b", "c"], ["d"], ["e"]]


async def test_a_failed_group_is_written_again_one_by_one_so_only_the_bad_one_fails() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10)
    gate = asyncio.Event()
    written: list[list[str]] = []

    async def write(items: list[str]) -> list[str]:
        written.append(items)
        await gate.wait()
        if "bad" in items:
            raise DatabaseError("a value the table refuses")
        return [f"{item} written" for item in items]

    first = asyncio.create_task(groups.write("agent", "a", 1, write))
    await settle()
    grouped = [
        asyncio.create_task(groups.write("agent", item, 1, write)) for item in ["b", "bad", "c"]
    ]
    await settle()
    gate.set()
    assert await answer(first) == "a written"
    assert await answer(grouped[0]) == "b written"
    with pytest.raises(DatabaseError, match="refuses"):
        await answer(grouped[1])
    assert await answer(grouped[2]) == "c written"
    assert written[:2] == [["a"], ["b", "bad", "c"]]
    assert sorted(written[2:]) == [["b"], ["bad"], ["c"]]


async def test_a_cancelled_waiting_write_is_not_written() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10)
    writer = Writer()
    writer.gate.clear()
    first = asyncio.create_task(groups.write("agent", "a", 1, writer))
    await settle()
    gone = asyncio.create_task(groups.write("agent", "b", 1, writer))
    kept = asyncio.create_task(groups.write("agent", "c", 1, writer))
    await settle()
    gone.cancel()
    await settle()
    writer.gate.set()
    await first
    assert await answer(kept) == "c written in group 2"
    assert writer.groups == [["a"], ["c"]]
    assert gone.cancelled()


async def test_a_write_cancelled_as_its_turn_came_hands_its_group_on() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10)
    gate = asyncio.Event()
    written: list[list[str]] = []
    turn: asyncio.Task[str] | None = None

    async def write(items: list[str]) -> list[str]:
        written.append(items)
        await gate.wait()
        if items == ["a"]:  # cancel b once its turn is set, before it runs
            assert turn is not None
            asyncio.get_running_loop().call_soon(turn.cancel)
        return [f"{item} written" for item in items]

    first = asyncio.create_task(groups.write("agent", "a", 1, write))
    await settle()
    turn = asyncio.create_task(groups.write("agent", "b", 1, write))
    behind = [asyncio.create_task(groups.write("agent", item, 1, write)) for item in "cd"]
    await settle()
    gate.set()
    assert await first == "a written"
    assert [await answer(task) for task in behind] == ["c written", "d written"]
    assert turn.cancelled()
    assert written == [["a"], ["c", "d"]]
    assert await groups.write("agent", "e", 1, write) == "e written"


async def test_a_cancelled_writer_fails_the_rest_of_its_group_so_they_send_again() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10)
    release = {item: asyncio.Event() for item in "xac"}
    written: list[list[str]] = []

    async def write(items: list[str]) -> list[str]:
        written.append(items)
        await release[items[0]].wait()
        return [f"{item} written" for item in items]

    alone = asyncio.create_task(groups.write("agent", "x", 1, write))
    await settle()
    writing = asyncio.create_task(groups.write("agent", "a", 1, write))
    grouped = asyncio.create_task(groups.write("agent", "b", 1, write))
    await settle()
    release["x"].set()
    assert await alone == "x written"
    await settle()
    assert written == [["x"], ["a", "b"]]
    writing.cancel()
    with pytest.raises(DatabaseError, match="send it again"):
        await answer(grouped)
    release["c"].set()
    assert await groups.write("agent", "c", 1, write) == "c written"


async def test_more_writers_write_that_many_groups_at_once() -> None:
    groups: GroupCommit[str, str, str] = GroupCommit(max_weight=10, writers=2)
    writer = Writer()
    writer.gate.clear()
    tasks = [asyncio.create_task(groups.write("agent", item, 1, writer)) for item in "abcd"]
    await settle()
    assert writer.groups == [["a"], ["b"]]
    writer.gate.set()
    await asyncio.gather(*tasks)
    assert writer.groups == [["a"], ["b"], ["c", "d"]]
