"""Hypothesis fuzz of the ATIF validator (``evalkit.atif``): valid trajectories mutated by
replacing, removing, adding and nulling values anywhere, and random JSON.

Whatever the document, ``validate_trajectory`` answers a list of problems, each with a path
into the document, a rule id and a message; it never raises. ``validate_json`` on the
document's JSON text answers exactly the same list (it decodes one step at a time), and on
text that is not JSON raises exactly what decoding it whole raises. ``parse_trajectory``
agrees with them: a document without problems becomes a ``Trajectory`` (which summarises),
any other raises ``AtifValidationError`` listing exactly those problems.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.atif import (
    SCHEMA_VERSIONS,
    AtifError,
    AtifValidationError,
    parse_trajectory,
    summarize,
    validate_json,
    validate_trajectory,
)
from tests.fuzz.conftest import examples

RULE = re.compile(r"^[a-z]+(-[a-z0-9]+)*$")
SEGMENT = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')

VALID: dict[str, Any] = {
    "schema_version": "ATIF-v1.8",
    "session_id": "run-1",
    "trajectory_id": "main",
    "agent": {
        "name": "demo",
        "version": "1",
        "model_name": "m",
        "tool_definitions": [{"type": "function", "function": {"name": "read"}}],
        "extra": {"k": 1},
    },
    "steps": [
        {"step_id": 1, "source": "system", "message": "be careful"},
        {
            "step_id": 2,
            "timestamp": "2026-01-05T09:00:01Z",
            "source": "user",
            "message": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"media_type": "image/png", "path": "a.png"}},
                {
                    "type": "audio",
                    "source": {"media_type": "audio/wav", "path": "a.wav", "duration_sec": 1.5},
                },
            ],
        },
        {
            "step_id": 3,
            "source": "agent",
            "model_name": "m",
            "reasoning_effort": "low",
            "reasoning_content": "think",
            "message": "reading",
            "tool_calls": [
                {"tool_call_id": "c1", "function_name": "read", "arguments": {"p": "x"}},
                {"tool_call_id": "c2", "function_name": "ask", "arguments": {}, "extra": {}},
            ],
            "observation": {
                "results": [
                    {"source_call_id": "c1", "content": "text"},
                    {
                        "source_call_id": "c2",
                        "content": [{"type": "text", "text": "answer"}],
                        "subagent_trajectory_ref": [{"trajectory_id": "sub"}],
                    },
                    {"subagent_trajectory_ref": [{"trajectory_path": "other.json"}]},
                ]
            },
            "metrics": {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "cached_tokens": 5,
                "cost_usd": 0.1,
                "prompt_token_ids": [1, 2],
                "completion_token_ids": [3, 4, 5],
                "logprobs": [-0.1, -0.2, -0.3],
            },
            "llm_call_count": 1,
            "is_copied_context": False,
            "extra": {"note": "x"},
        },
        {
            "step_id": 4,
            "source": "system",
            "message": "",
            "observation": {"results": [{"content": "summary"}]},
            "extra": {"context_management": {"type": "compaction", "boundary": "replace"}},
        },
    ],
    "notes": "fuzz seed",
    "final_metrics": {
        "total_prompt_tokens": 10,
        "total_completion_tokens": 3,
        "total_cached_tokens": 5,
        "total_cost_usd": 0.1,
        "total_steps": 4,
    },
    "extra": {},
    "subagent_trajectories": [
        {
            "schema_version": "ATIF-v1.8",
            "trajectory_id": "sub",
            "agent": {"name": "helper", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "help"}],
        }
    ],
}

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
        st.sampled_from((*SCHEMA_VERSIONS, "ATIF-v9", "c1", "sub", "agent", "text", "image")),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=8,
)
field_names = st.one_of(
    st.sampled_from(
        [
            "step_id",
            "source",
            "message",
            "tool_calls",
            "observation",
            "metrics",
            "extra",
            "results",
            "content",
            "type",
            "text",
            "source_call_id",
            "trajectory_id",
            "subagent_trajectory_ref",
            "llm_call_count",
            "schema_version",
            "notes",
            "path",
        ]
    ),
    st.text(max_size=8),
)


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    doc: Any = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 4))):
        parent, key = None, None
        current: Any = doc
        while isinstance(current, dict | list) and current and draw(st.booleans()):
            parent = current
            key = draw(
                st.sampled_from(list(current) if isinstance(current, dict) else range(len(current)))
            )
            current = parent[key]
        action = draw(st.sampled_from(["replace", "remove", "add", "null", "duplicate"]))
        if parent is None:
            doc = draw(json_values) if action == "replace" else doc
        elif action == "replace":
            parent[key] = draw(json_values)
        elif action == "null":
            parent[key] = None
        elif action == "remove":
            del parent[key]
        elif action == "add" and isinstance(current, dict):
            current[draw(field_names)] = draw(json_values)
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(current))
    return doc


def resolvable(doc: Any, path: str) -> bool:
    """Every step of ``path`` but the last exists in ``doc`` (the last may be the missing
    field a "required" problem names)."""
    if not path:
        return True
    segments, at = [], 0
    while at < len(path):
        match = SEGMENT.match(path, at)
        if match is None:
            return False
        name, index, quoted = match.groups()
        segments.append(name if name else int(index) if index else json.loads(quoted))
        at = match.end()
    node = doc
    for segment in segments[:-1]:
        in_object = isinstance(node, dict) and isinstance(segment, str) and segment in node
        in_array = isinstance(node, list) and isinstance(segment, int) and segment < len(node)
        if not (in_object or in_array):
            return False
        node = node[segment]
    return True


def check(doc: Any) -> list[AtifError]:
    errors = validate_trajectory(doc)
    for error in errors:
        assert isinstance(error, AtifError)
        assert RULE.match(error.rule), error
        assert error.message.strip(), error
        assert resolvable(doc, error.path), error
    text = msgspec.json.encode(doc)
    assert validate_json(text) == errors, "validate_json disagrees with validate_trajectory"
    assert validate_json(text.decode()) == errors
    try:  # a str would be read as JSON text: give it as the JSON of the string
        trajectory = parse_trajectory(msgspec.json.encode(doc) if isinstance(doc, str) else doc)
    except AtifValidationError as exc:
        assert exc.errors == errors, "parse_trajectory disagrees with validate_trajectory"
        assert errors
    else:
        assert errors == [], errors
        summarize(trajectory)
        encoded = msgspec.json.encode(trajectory)
        assert validate_trajectory(msgspec.json.decode(encoded)) == []  # round trip
    return errors


def test_the_seed_is_valid() -> None:
    assert check(copy.deepcopy(VALID)) == []


@settings(max_examples=examples(600))
@given(mutated())
def test_mutated_trajectories(doc: Any) -> None:
    check(doc)


@settings(max_examples=examples(200))
@given(json_values)
def test_any_json(doc: Any) -> None:
    check(doc)


def whole_decode_outcome(data: bytes | str) -> object:
    """What decoding ``data`` whole gives: its validation, or the exception (type, text)."""
    try:
        return validate_trajectory(msgspec.json.decode(data))
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        return type(exc), str(exc)


def validate_json_outcome(data: bytes | str) -> object:
    try:
        return validate_json(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        return type(exc), str(exc)


@st.composite
def damaged_text(draw: st.DrawFn) -> bytes:
    """The JSON of a mutated trajectory with bytes changed, cut or inserted somewhere (steps
    included), or a number or string that decodes only in part (out of range, not UTF-8)."""
    text = bytearray(msgspec.json.encode(draw(mutated())))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        junk = draw(
            st.sampled_from(
                [b"", b",", b"]", b"{", b'"', b"1e400", b'"\\xff"', b"\\ud800", b"\xff"]
            )
        )
        cut = draw(st.integers(0, 2))
        text[at : at + cut] = junk
    return bytes(text)


@settings(max_examples=examples(400))
@given(damaged_text())
def test_validate_json_answers_as_the_whole_decode(data: bytes) -> None:
    assert validate_json_outcome(data) == whole_decode_outcome(data)


def test_validate_json_fails_on_a_part_the_walk_leaves_out() -> None:
    """Subagents nested past the walk's limit are not walked, but still decoded: a number
    out of range in one fails the document as the whole decode does."""
    doc: dict[str, Any] = copy.deepcopy(VALID["subagent_trajectories"][0])
    doc["steps"][0]["extra"] = {"n": "OUT_OF_RANGE"}
    for depth in range(20):
        doc = {
            **copy.deepcopy(VALID["subagent_trajectories"][0]),
            "trajectory_id": f"t{depth}",
            "subagent_trajectories": [doc],
        }
    data = msgspec.json.encode(doc).replace(b'"OUT_OF_RANGE"', b"1e400")
    outcome = whole_decode_outcome(data)
    assert isinstance(outcome, tuple) and outcome[0] is msgspec.ValidationError
    assert validate_json_outcome(data) == outcome


@settings(max_examples=examples(100))
@given(st.binary(max_size=300))
def test_any_bytes(data: bytes) -> None:
    assert validate_json_outcome(data) == whole_decode_outcome(data)
    try:
        parse_trajectory(data)
    except AtifValidationError as exc:
        assert exc.errors and all(RULE.match(e.rule) for e in exc.errors)


def test_deep_subagent_nesting_is_a_problem_not_a_crash() -> None:
    doc: dict[str, Any] = copy.deepcopy(VALID["subagent_trajectories"][0])
    for depth in range(40):
        parent = copy.deepcopy(VALID["subagent_trajectories"][0])
        parent["trajectory_id"] = f"t{depth}"
        parent["subagent_trajectories"] = [doc]
        doc = parent
    rules = {e.rule for e in check(doc)}
    assert "nesting-too-deep" in rules


def test_deeply_nested_json_is_a_problem_not_a_crash() -> None:
    errors = check({**copy.deepcopy(VALID), "extra": {"a": json.loads("[" * 500 + "]" * 500)}})
    assert errors == []
    try:
        parse_trajectory(b'{"extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    except AtifValidationError as exc:
        assert [e.rule for e in exc.errors] == ["json-invalid"]
