"""Score summaries and comparisons are kept in the server's memory by key (found by
benchmarks/load_reads.py: each request made them again, about a second of the edge's CPU
for two experiments of 5,000 runs, and 20 users asking brought every route to seconds)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from evalkit.edge.routes import stats


def test_callers_at_once_share_one_computation_and_answers_are_kept():
    made: list[str] = []

    async def main() -> None:
        state = SimpleNamespace()

        def maker(key: str):
            async def make() -> str:
                made.append(key)
                await asyncio.sleep(0.05)
                return f"answer {key}"

            return make

        answers = await asyncio.gather(*(stats.kept(state, "a", maker("a")) for _ in range(20)))
        assert answers == ["answer a"] * 20
        assert await stats.kept(state, "a", maker("a")) == "answer a"
        assert await stats.kept(state, "b", maker("b")) == "answer b"

    asyncio.run(main())
    assert made == ["a", "b"]


def test_a_failure_is_not_kept():
    calls = 0

    async def main() -> None:
        state = SimpleNamespace()

        async def make() -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise ValueError("first attempt fails")
            return "answer"

        with pytest.raises(ValueError):
            await stats.kept(state, "k", make)
        assert await stats.kept(state, "k", make) == "answer"
        assert await stats.kept(state, "k", make) == "answer"

    asyncio.run(main())
    assert calls == 2


def test_only_the_newest_answers_are_kept():
    async def main() -> None:
        state = SimpleNamespace()

        async def make() -> int:
            return 1

        for n in range(stats.KEPT + 10):
            await stats.kept(state, n, make)
        assert len(state.stats_kept) == stats.KEPT
        assert list(state.stats_kept)[-1] == stats.KEPT + 9

    asyncio.run(main())
