"""Writes of one key that arrive together, written together.

Up to ``writers`` groups of a key are written at once. A write that finds them all under
way waits; when one ends, the writes waiting are made a group (up to a weight), the first of
them writes it, in one call, and each gets its own answer. A write that finds a writer free
starts at once; under load, several share one transaction's round trips and commit. Each
request's work stays in its own task: the writer of a group is one of its requests.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from evalkit.errors import DatabaseError

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("evalkit.edge.group_commit")


@dataclass(eq=False)
class _Waiting(Generic[T]):
    item: T
    weight: int
    answer: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class _Alone:
    """The group failed: write again alone, so that one bad item fails only its own."""


_ALONE = _Alone()


@dataclass
class _Turn(Generic[T]):
    """A waiting request's turn to write a group: it, first, and those after it."""

    group: list[_Waiting[T]]


class GroupCommit(Generic[K, T, R]):
    """Groups the writes of each key; a group weighs at most ``max_weight`` (a write
    heavier than that goes in a group of its own)."""

    def __init__(self, max_weight: int, writers: int = 1) -> None:
        self.max_weight = max_weight
        self.writers = writers
        self._waiting: dict[K, deque[_Waiting[T]]] = {}
        self._writing: dict[K, int] = {}
        """Groups being written, by key; requests wait only while there are ``writers``."""

    async def write(
        self,
        key: K,
        item: T,
        weight: int,
        write_group: Callable[[list[T]], Awaitable[list[R]]],
    ) -> R:
        """``item``'s answer from ``write_group``, called with it and the items written in
        the same group (one answer each, in order). Should the call for a group fail, each
        of its items is written again alone, and fails alone."""
        own = _Waiting(item, weight)
        writing = self._writing.get(key, 0)
        if writing < self.writers:
            self._writing[key] = writing + 1
            group = [own]
        else:
            self._waiting.setdefault(key, deque()).append(own)
            log.debug("a write of %r waits for the %d under way", key, writing)
            try:
                answer = await own.answer
            except asyncio.CancelledError:
                self._withdraw(key, own)
                raise
            if answer is _ALONE:
                return (await write_group([item]))[0]
            if not isinstance(answer, _Turn):
                return answer  # type: ignore[no-any-return]
            group = answer.group
        try:
            return await self._write_group(group, write_group)
        finally:
            self._hand_on(key)

    async def _write_group(
        self, group: list[_Waiting[T]], write_group: Callable[[list[T]], Awaitable[list[R]]]
    ) -> R:
        try:
            answers = await write_group([w.item for w in group])
        except Exception:
            if len(group) == 1:
                raise
            log.warning("a group of %d writes failed; each is written again alone", len(group))
            for waiting in group[1:]:
                _answer(waiting, _ALONE)
            return (await write_group([group[0].item]))[0]
        except BaseException:  # cancelled: the others learn it failed, and may send again
            interrupted = DatabaseError(
                "the transaction writing this request with others was interrupted (the "
                "server may be stopping); nothing of it can be counted on: send it again"
            )
            for waiting in group[1:]:
                _answer(waiting, interrupted)
            raise
        for waiting, answer in zip(group[1:], answers[1:], strict=True):
            _answer(waiting, answer)
        return answers[0]

    def _hand_on(self, key: K) -> None:
        """A group was written: the requests waiting make the next, and the first of them
        writes it; none waiting, one writer fewer."""
        queue = self._waiting.get(key)
        while queue:
            group = [queue.popleft()]
            if group[0].answer.done():
                continue  # its request was cancelled while it waited
            weight = group[0].weight
            while queue and weight + queue[0].weight <= self.max_weight:
                weight += queue[0].weight
                group.append(queue.popleft())
            group[0].answer.set_result(_Turn(group))
            return
        self._waiting.pop(key, None)
        self._writing[key] -= 1
        if not self._writing[key]:
            del self._writing[key]

    def _withdraw(self, key: K, own: _Waiting[T]) -> None:
        """A waiting request was cancelled. Still waiting: it leaves the queue. Its turn to
        write a group had come: the next of that group writes it, or, alone, the next group
        is made."""
        queue = self._waiting.get(key)
        if queue is not None and own in queue:
            queue.remove(own)
            return
        answer = own.answer
        if not answer.done() or answer.cancelled() or not isinstance(answer.result(), _Turn):
            return  # it was in a group another request writes: that one answers the rest
        rest = [w for w in answer.result().group[1:] if not w.answer.done()]
        if rest:
            rest[0].answer.set_result(_Turn(rest))
        else:
            self._hand_on(key)


def _answer(waiting: _Waiting[Any], outcome: object) -> None:
    if waiting.answer.done():  # its request was cancelled while the group was written
        return
    if isinstance(outcome, BaseException):
        waiting.answer.set_exception(outcome)
    else:
        waiting.answer.set_result(outcome)
