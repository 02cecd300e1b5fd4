"""Memory of a large trajectory on the worker's path, counted by tracemalloc (Python's own
allocations: deterministic for a given document, unlike RSS or time). The bounds are those
docs/deploy.md states, with room; benchmarks/trajectory_memory.py measures the whole path.

Before validation went a step at a time, checking a trajectory of many small values held
its decoded JSON, about 3.8 times its size (here 0.64); scoring held psycopg's dicts and
then the Structs converted from them, about 5 times (here 4, the Structs alone).
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from evalkit.atif import validate_json, validate_trajectory
from evalkit.atif.model import Trajectory
from evalkit.model.runs import TrajectoryRecord
from evalkit.store import runs as store
from evalkit.store import scores

STEPS = 1_500


def many_small_values(steps: int = STEPS, *, emoji: bool = False) -> bytes:
    """Short texts (one with an emoji, when asked), two tool calls and two results per step,
    metrics with token ids and logprobs: the shape whose decoded objects cost the most."""
    body: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": "sum the file"}]
    for n in range(2, steps + 1):
        calls = [
            {
                "tool_call_id": f"c{n}-{j}",
                "function_name": "read_file",
                "arguments": {"path": f"src/f{n}-{j}.py", "start": n},
            }
            for j in range(2)
        ]
        body.append(
            {
                "step_id": n,
                "timestamp": "2026-01-05T09:00:00Z",
                "source": "agent",
                "message": f"step {n}: read both files \u2014 then add the totals",
                "tool_calls": calls,
                "observation": {
                    "results": [
                        {"source_call_id": c["tool_call_id"], "content": f"line {n} of {j}"}
                        for j, c in enumerate(calls)
                    ]
                },
                "metrics": {
                    "prompt_tokens": 1000 + n,
                    "completion_tokens": 50,
                    "completion_token_ids": [1000 + i for i in range(8)],
                    "logprobs": [-0.01 * (i + 1) for i in range(8)],
                },
            }
        )
    if emoji:
        body[-1]["message"] += " \U0001f600"
    doc = {
        "schema_version": "ATIF-v1.6",
        "session_id": "s",
        "agent": {"name": "a", "version": "1"},
        "steps": body,
    }
    return msgspec.json.encode(doc)


def traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """``fn()``, with the peak and the retained bytes it allocated."""
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak, retained


@pytest.mark.parametrize("emoji", [False, True])
def test_validating_holds_no_decoded_copy(emoji: bool) -> None:
    data = many_small_values(emoji=emoji)
    checked, peak, _ = traced(
        lambda: store._checked(TrajectoryRecord(source="harness", received=data))
    )
    assert checked["valid"] and checked["raw"] is None
    assert checked["body"].data is data  # stored as received: no text, no re-encoding
    # what stays is one undecoded view per step and every tool call id with where it is
    assert peak < 1.0 * len(data), f"validation peaked at {peak / len(data):.2f}x the size"


def test_a_step_at_a_time_finds_what_the_whole_walk_finds() -> None:
    doc = msgspec.json.decode(many_small_values(50))
    doc["steps"][7]["step_id"] = 99
    doc["steps"][9]["tool_calls"][1]["tool_call_id"] = "c10-0"
    doc["steps"][12]["metrics"]["logprobs"] = [0.5]
    data = msgspec.json.encode(doc)
    errors = validate_json(data)
    assert [e.rule for e in errors] == [
        "step-id-sequence",
        "tool-call-id-unique",
        "observation-refers-to-unknown-call",
        "logprobs-length-mismatch",
    ]
    assert errors == validate_trajectory(doc)


def test_bytes_that_are_not_utf8_are_kept_as_text_with_replacements() -> None:
    data = many_small_values(3).replace(b"sum the file", b"sum the \xff file")
    checked = store._checked(TrajectoryRecord(source="harness", received=data))
    assert checked["valid"] and checked["body"] == data.decode("utf-8", "replace")


def test_scoring_reads_the_structs_straight_from_the_text() -> None:
    data = many_small_values()
    trajectory, peak, retained = traced(lambda: scores._decode_trajectory(memoryview(data)))
    assert isinstance(trajectory, Trajectory) and len(trajectory.steps) == STEPS
    assert peak - retained < 0.05 * len(data), "a transient copy while decoding"
    assert retained < 4.5 * len(data), f"the Structs take {retained / len(data):.2f}x the size"


def test_a_stored_trajectory_the_structs_refuse_reads_as_unreadable() -> None:
    refused = scores._decode_trajectory(b'{"schema_version": "ATIF-v1.6", "steps": []}')
    assert isinstance(refused, str) and "agent" in refused
