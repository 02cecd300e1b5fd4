"""ATIF model, validator and summary: one broken document per rule, plus garbage input."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest

import evalkit.atif
from evalkit.atif import (
    AtifError,
    AtifValidationError,
    AudioPart,
    ImagePart,
    TextPart,
    Trajectory,
    parse_trajectory,
    summarize,
    trajectory_json_schema,
    validate_trajectory,
)

# The complete valid example of the format notes (section 10).
EXAMPLE: dict[str, Any] = {
    "schema_version": "ATIF-v1.7",
    "session_id": "run-7f3c2a",
    "trajectory_id": "traj-7f3c2a-main",
    "agent": {
        "name": "demo-agent",
        "version": "0.3.1",
        "model_name": "example-model-1",
        "tool_definitions": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Return the text of a file",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    },
                },
            }
        ],
    },
    "steps": [
        {
            "step_id": 1,
            "timestamp": "2026-01-05T09:00:00Z",
            "source": "system",
            "message": "You are a careful coding assistant.",
        },
        {
            "step_id": 2,
            "timestamp": "2026-01-05T09:00:01Z",
            "source": "user",
            "message": "How many lines does notes.txt have?",
        },
        {
            "step_id": 3,
            "timestamp": "2026-01-05T09:00:03Z",
            "source": "agent",
            "model_name": "example-model-1",
            "reasoning_effort": "low",
            "reasoning_content": "I need the file contents before I can count lines.",
            "message": "Let me read the file.",
            "tool_calls": [
                {
                    "tool_call_id": "call_1",
                    "function_name": "read_file",
                    "arguments": {"path": "notes.txt"},
                }
            ],
            "observation": {"results": [{"source_call_id": "call_1", "content": "alpha\nbeta\n"}]},
            "metrics": {
                "prompt_tokens": 210,
                "completion_tokens": 32,
                "cached_tokens": 150,
                "cost_usd": 0.00041,
            },
            "llm_call_count": 1,
        },
        {
            "step_id": 4,
            "timestamp": "2026-01-05T09:00:05Z",
            "source": "agent",
            "message": "notes.txt has 3 lines.",
            "metrics": {
                "prompt_tokens": 260,
                "completion_tokens": 9,
                "cached_tokens": 200,
                "cost_usd": 0.00022,
                "completion_token_ids": [101, 7, 55, 9, 2],
                "logprobs": [-0.01, -0.2, -0.05, -0.3, -0.02],
            },
        },
    ],
    "final_metrics": {
        "total_prompt_tokens": 470,
        "total_completion_tokens": 41,
        "total_cached_tokens": 350,
        "total_cost_usd": 0.00063,
        "total_steps": 4,
    },
}


def doc() -> dict[str, Any]:
    return copy.deepcopy(EXAMPLE)


def found(d: object, **kwargs: Any) -> list[tuple[str, str]]:
    return [(e.rule, e.path) for e in validate_trajectory(d, **kwargs)]


def child(trajectory_id: str | None = "sub-1", **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "summariser", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": "summarise"}],
        **extra,
    }
    if trajectory_id is not None:
        c["trajectory_id"] = trajectory_id
    return c


def with_ref(d: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    d["steps"][2]["observation"]["results"].append({"subagent_trajectory_ref": [ref]})
    return d


# --- the valid example ------------------------------------------------------------------


def test_example_is_valid_and_round_trips() -> None:
    assert validate_trajectory(doc()) == []
    traj = parse_trajectory(msgspec.json.encode(EXAMPLE))
    assert isinstance(traj, Trajectory)
    assert msgspec.to_builtins(traj) == EXAMPLE
    assert msgspec.json.decode(msgspec.json.encode(traj)) == EXAMPLE
    assert parse_trajectory(doc()) == traj
    assert parse_trajectory(msgspec.json.encode(EXAMPLE).decode()) == traj


@pytest.mark.parametrize("version", ["ATIF-v1.7", "ATIF-v1.8"])
def test_example_valid_under_each_version_with_its_fields(version: str) -> None:
    d = doc()
    d["schema_version"] = version
    assert validate_trajectory(d) == []


def test_explicit_nulls_are_accepted_and_dropped_on_encode() -> None:
    d = doc()
    d["steps"][1].update(model_name=None, metrics=None, tool_calls=None)
    d["notes"] = None
    assert validate_trajectory(d) == []
    assert msgspec.to_builtins(parse_trajectory(d)) == EXAMPLE


# --- rule 1, 24, 27: versions -------------------------------------------------------------


def test_schema_version_unknown() -> None:
    d = doc()
    d["schema_version"] = "ATIF-v2.0"
    assert found(d) == [("schema-version-unknown", "schema_version")]


def test_schema_version_missing_is_required() -> None:
    d = doc()
    del d["schema_version"]
    assert found(d) == [("required", "schema_version")]


def test_session_id_required_up_to_v1_6() -> None:
    d = child(None, schema_version="ATIF-v1.6")
    assert found(d) == [("session-id-required", "session_id")]
    d["schema_version"] = "ATIF-v1.7"
    assert found(d) == []


def test_fields_newer_than_declared_version() -> None:
    d = doc()
    d["schema_version"] = "ATIF-v1.4"
    assert found(d) == [
        ("field-requires-newer-version", "trajectory_id"),
        ("field-requires-newer-version", "agent.tool_definitions"),
        ("field-requires-newer-version", "steps[2].llm_call_count"),
    ]
    d["schema_version"] = "ATIF-v1.2"
    d["steps"][3]["metrics"]["prompt_token_ids"] = [1]
    rules = found(d)
    assert ("field-requires-newer-version", "steps[3].metrics.completion_token_ids") in rules
    assert ("field-requires-newer-version", "steps[3].metrics.prompt_token_ids") in rules


def test_system_observation_needs_v1_2_and_root_extra_v1_1() -> None:
    d = child(None, schema_version="ATIF-v1.0", session_id="s", extra={"k": 1})
    d["steps"][0] = {
        "step_id": 1,
        "source": "system",
        "message": "reset",
        "observation": {"results": [{"content": "ok"}]},
    }
    assert found(d) == [
        ("field-requires-newer-version", "extra"),
        ("field-requires-newer-version", "steps[0].observation"),
    ]


# --- rules 2, 3, 7: presence ------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "name", "path"),
    [
        ((), "agent", "agent"),
        ((), "steps", "steps"),
        (("agent",), "name", "agent.name"),
        (("agent",), "version", "agent.version"),
        (("steps", 0), "message", "steps[0].message"),
        (("steps", 0), "source", "steps[0].source"),
        (("steps", 0), "step_id", "steps[0].step_id"),
        (("steps", 2, "tool_calls", 0), "tool_call_id", "steps[2].tool_calls[0].tool_call_id"),
        (
            ("steps", 2, "tool_calls", 0),
            "function_name",
            "steps[2].tool_calls[0].function_name",
        ),
        (("steps", 2, "tool_calls", 0), "arguments", "steps[2].tool_calls[0].arguments"),
        (("steps", 2, "observation"), "results", "steps[2].observation.results"),
    ],
)
def test_required_fields(where: tuple[Any, ...], name: str, path: str) -> None:
    d = doc()
    node: Any = d
    for part in where:
        node = node[part]
    del node[name]
    assert ("required", path) in found(d)


def test_steps_empty() -> None:
    d = doc()
    d["steps"] = []
    del d["final_metrics"]
    assert found(d) == [("steps-empty", "steps")]


def test_empty_message_is_fine_but_null_is_not() -> None:
    d = doc()
    d["steps"][3]["message"] = ""
    assert found(d) == []
    d["steps"][3]["message"] = None
    assert found(d) == [("type", "steps[3].message")]


# --- rules 4, 5, 6: step numbering, timestamps, source ---------------------------------------


def test_step_id_gap() -> None:
    d = doc()
    for step, step_id in zip(d["steps"], [1, 2, 4, 5], strict=True):
        step["step_id"] = step_id
    assert found(d) == [
        ("step-id-sequence", "steps[2].step_id"),
        ("step-id-sequence", "steps[3].step_id"),
    ]


@pytest.mark.parametrize("bad", ["3", 3.0, True, None])
def test_step_id_wrong_type(bad: object) -> None:
    d = doc()
    d["steps"][2]["step_id"] = bad
    assert found(d) == [("type", "steps[2].step_id")]


@pytest.mark.parametrize(
    "stamp", ["2026-01-05", "2026-01-05T09:00:00", "2026-01-05T09:00:00.5+02:00"]
)
def test_iso_timestamps_accepted(stamp: str) -> None:
    d = doc()
    d["steps"][0]["timestamp"] = stamp
    assert found(d) == []


def test_timestamp_invalid() -> None:
    d = doc()
    d["steps"][1]["timestamp"] = "yesterday"
    assert found(d) == [("timestamp-invalid", "steps[1].timestamp")]


def test_source_unknown() -> None:
    d = doc()
    d["steps"][3]["source"] = "tool"
    assert found(d) == [("step-source-unknown", "steps[3].source")]


# --- rules 8, 9, 10: which fields go on which step ----------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("model_name", "m"),
        ("reasoning_effort", 2),
        ("reasoning_content", "hm"),
        ("tool_calls", []),
        ("metrics", {"prompt_tokens": 1}),
    ],
)
@pytest.mark.parametrize("index", [0, 1])
def test_agent_only_fields(name: str, value: object, index: int) -> None:
    d = doc()
    d["steps"][index][name] = value
    assert found(d) == [("agent-only-field", f"steps[{index}].{name}")]


def test_fields_allowed_on_any_step() -> None:
    d = doc()
    d["steps"][1].update(
        extra={"k": "v"},
        llm_call_count=0,
        is_copied_context=True,
        observation={"results": [{"content": "attached file"}]},
    )
    assert found(d) == []


# --- rules 11-15: tool calls and observations -------------------------------------------


def test_arguments_must_be_an_object() -> None:
    d = doc()
    d["steps"][2]["tool_calls"][0]["arguments"] = '{"path": "notes.txt"}'
    errors = validate_trajectory(d)
    assert [(e.rule, e.path) for e in errors] == [("type", "steps[2].tool_calls[0].arguments")]
    assert "JSON-encoded string" in errors[0].message


def test_tool_call_id_unique() -> None:
    d = doc()
    d["steps"][3]["tool_calls"] = [
        {"tool_call_id": "call_1", "function_name": "read_file", "arguments": {}}
    ]
    errors = validate_trajectory(d)
    assert [(e.rule, e.path) for e in errors] == [
        ("tool-call-id-unique", "steps[3].tool_calls[0].tool_call_id")
    ]
    assert "steps[2].tool_calls[0].tool_call_id" in errors[0].message


def test_observation_refers_to_unknown_call() -> None:
    d = doc()
    d["steps"][2]["observation"]["results"][0]["source_call_id"] = "call_9"
    assert found(d) == [
        ("observation-refers-to-unknown-call", "steps[2].observation.results[0].source_call_id")
    ]


def test_observation_cannot_answer_a_call_of_another_step() -> None:
    d = doc()
    d["steps"][3]["observation"] = {"results": [{"source_call_id": "call_1", "content": "x"}]}
    errors = validate_trajectory(d)
    assert [(e.rule, e.path) for e in errors] == [
        ("observation-refers-to-unknown-call", "steps[3].observation.results[0].source_call_id")
    ]
    assert "steps[2]" in errors[0].message


def test_system_step_result_cannot_name_a_call() -> None:
    d = doc()
    d["steps"][0]["observation"] = {"results": [{"source_call_id": "call_1"}]}
    assert found(d) == [
        ("observation-refers-to-unknown-call", "steps[0].observation.results[0].source_call_id")
    ]


def test_calls_without_results_and_null_source_call_id_are_accepted() -> None:
    d = doc()
    d["steps"][2]["observation"]["results"] = [{"source_call_id": None, "content": "log"}]
    assert found(d) == []
    del d["steps"][2]["observation"]
    assert found(d) == []


# --- rules 16-18: subagents -------------------------------------------------------------


def test_embedded_subagent_and_ref_are_valid() -> None:
    d = with_ref(doc(), {"trajectory_id": "sub-1", "session_id": "run-7f3c2a"})
    d["subagent_trajectories"] = [child("sub-1")]
    assert found(d) == []
    traj = parse_trajectory(d)
    assert traj.subagent_trajectories is not None
    assert traj.subagent_trajectories[0].trajectory_id == "sub-1"


def test_file_ref_needs_no_embedded_trajectory() -> None:
    d = with_ref(doc(), {"trajectory_path": "sub/trajectory.json"})
    assert found(d) == []


def test_ref_with_only_session_id_is_unresolvable() -> None:
    d = with_ref(doc(), {"session_id": "run-x"})
    assert found(d) == [
        ("subagent-ref-unresolvable", "steps[2].observation.results[1].subagent_trajectory_ref[0]")
    ]


def test_ref_to_unknown_embedded_trajectory() -> None:
    d = with_ref(doc(), {"trajectory_id": "nope"})
    d["subagent_trajectories"] = [child("sub-1")]
    path = "steps[2].observation.results[1].subagent_trajectory_ref[0].trajectory_id"
    assert found(d) == [("subagent-ref-unknown-trajectory", path)]


def test_embedded_subagent_needs_unique_id() -> None:
    d = doc()
    d["subagent_trajectories"] = [child(None), child("a"), child("a")]
    assert found(d) == [
        ("embedded-subagent-id-required", "subagent_trajectories[0].trajectory_id"),
        ("embedded-subagent-id-unique", "subagent_trajectories[2].trajectory_id"),
    ]


def test_embedded_subagents_are_validated_recursively() -> None:
    inner = child("inner")
    inner["steps"][0].update(step_id=2, source="robot", metrics={"prompt_tokens": 1})
    outer = child("outer", subagent_trajectories=[inner])
    outer["steps"][0]["role"] = "x"
    d = doc()
    d["subagent_trajectories"] = [outer]
    assert found(d) == [
        ("unknown-field", "subagent_trajectories[0].steps[0].role"),
        ("step-id-sequence", "subagent_trajectories[0].subagent_trajectories[0].steps[0].step_id"),
        (
            "step-source-unknown",
            "subagent_trajectories[0].subagent_trajectories[0].steps[0].source",
        ),
    ]


def test_embedded_subagent_uses_its_own_version() -> None:
    d = doc()
    d["subagent_trajectories"] = [child("s", schema_version="ATIF-v1.4", session_id="s")]
    assert found(d) == [("field-requires-newer-version", "subagent_trajectories[0].trajectory_id")]


def test_deeply_nested_subagents_stop_with_an_error() -> None:
    d = doc()
    node = d
    for i in range(200):
        nested = child(f"t{i}")
        node["subagent_trajectories"] = [nested]
        node = nested
    rules = found(d)
    assert len(rules) == 1
    assert rules[0][0] == "nesting-too-deep"


# --- rule 19: llm_call_count ------------------------------------------------------------


def test_llm_call_count_zero_forbids_llm_data() -> None:
    d = doc()
    d["steps"][2]["llm_call_count"] = 0
    assert found(d) == [
        ("llm-call-count-zero-with-llm-data", "steps[2].metrics"),
        ("llm-call-count-zero-with-llm-data", "steps[2].reasoning_content"),
    ]


def test_llm_call_count_negative() -> None:
    d = doc()
    d["steps"][2]["llm_call_count"] = -1
    assert found(d) == [("negative-value", "steps[2].llm_call_count")]


# --- rules 20, 21: multimodal content ----------------------------------------------------


def image(media_type: str = "image/png", path: str = "images/x.png") -> dict[str, Any]:
    return {"type": "image", "source": {"media_type": media_type, "path": path}}


def audio(media_type: str = "audio/wav", **more: Any) -> dict[str, Any]:
    return {"type": "audio", "source": {"media_type": media_type, "path": "a.wav", **more}}


def test_multimodal_message_parses_to_tagged_parts() -> None:
    d = doc()
    d["schema_version"] = "ATIF-v1.8"
    d["steps"][1]["message"] = [{"type": "text", "text": "what is this?"}, image()]
    d["steps"][2]["observation"]["results"][0]["content"] = [audio("Audio/MP3", duration_sec=1.5)]
    assert found(d) == []
    traj = parse_trajectory(d)
    message = traj.steps[1].message
    assert isinstance(message, list)
    assert isinstance(message[0], TextPart)
    assert isinstance(message[1], ImagePart)
    content = traj.steps[2].observation.results[0].content  # type: ignore[union-attr]
    assert isinstance(content, list)
    assert isinstance(content[0], AudioPart)
    assert content[0].source.media_type == "audio/mpeg"
    assert summarize(traj).has_multimodal


def test_content_part_array_needs_v1_6_and_audio_v1_8() -> None:
    d = doc()
    d["schema_version"] = "ATIF-v1.7"
    d["steps"][1]["message"] = [audio()]
    assert found(d) == [("field-requires-newer-version", "steps[1].message[0].type")]
    d = child(None, schema_version="ATIF-v1.5", session_id="s")
    d["steps"][0]["message"] = [{"type": "text", "text": "hi"}]
    assert found(d) == [("field-requires-newer-version", "steps[0].message")]


@pytest.mark.parametrize(
    ("part", "rule", "path"),
    [
        ({"type": "video"}, "content-part-type-unknown", "steps[1].message[0].type"),
        ({"text": "x"}, "required", "steps[1].message[0].type"),
        ({"type": "text"}, "required", "steps[1].message[0].text"),
        ({"type": "image"}, "required", "steps[1].message[0].source"),
        (
            {"type": "text", "text": "x", "source": None},
            "content-part-field-forbidden",
            "steps[1].message[0].source",
        ),
        ({**image(), "text": "x"}, "content-part-field-forbidden", "steps[1].message[0].text"),
        (image("image/bmp"), "media-type-unknown", "steps[1].message[0].source.media_type"),
        (audio("audio/midi"), "media-type-unknown", "steps[1].message[0].source.media_type"),
        (image("audio/wav"), "media-kind-mismatch", "steps[1].message[0].source.media_type"),
        (audio("image/png"), "media-kind-mismatch", "steps[1].message[0].source.media_type"),
        (audio(duration_sec=-2), "negative-value", "steps[1].message[0].source.duration_sec"),
        ("just text", "type", "steps[1].message[0]"),
    ],
)
def test_content_part_rules(part: object, rule: str, path: str) -> None:
    d = doc()
    d["schema_version"] = "ATIF-v1.8"
    d["steps"][1]["message"] = [part]
    assert found(d) == [(rule, path)]


def test_media_files_checked_against_base_dir(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "ok.png").write_bytes(b"png")
    d = doc()
    d["steps"][1]["message"] = [
        image(path="images/ok.png"),
        image(path="images/gone.png"),
        image(path="https://example.com/x.png"),
    ]
    assert found(d) == []
    assert found(d, base_dir=tmp_path) == [
        ("media-file-missing", "steps[1].message[1].source.path")
    ]


# --- rules 22, 23: metrics sanity ---------------------------------------------------------


def test_cached_tokens_cannot_exceed_prompt_tokens() -> None:
    d = doc()
    d["steps"][2]["metrics"]["cached_tokens"] = 999
    d["final_metrics"]["total_cached_tokens"] = 9999
    assert found(d) == [
        ("cached-tokens-exceed-prompt", "steps[2].metrics.cached_tokens"),
        ("cached-tokens-exceed-prompt", "final_metrics.total_cached_tokens"),
    ]


def test_logprobs_length_mismatch() -> None:
    d = doc()
    d["steps"][3]["metrics"]["logprobs"].append(-1.0)
    assert found(d) == [("logprobs-length-mismatch", "steps[3].metrics.logprobs")]


@pytest.mark.parametrize(
    ("where", "name"),
    [
        (("steps", 2, "metrics"), "prompt_tokens"),
        (("steps", 2, "metrics"), "cost_usd"),
        (("final_metrics",), "total_completion_tokens"),
        (("final_metrics",), "total_steps"),
    ],
)
def test_negative_numbers(where: tuple[Any, ...], name: str) -> None:
    d = doc()
    node: Any = d
    for part in where:
        node = node[part]
    node[name] = -1
    path = ".".join(f"[{p}]" if isinstance(p, int) else p for p in where).replace(".[", "[")
    assert ("negative-value", f"{path}.{name}") in found(d)


def test_token_id_arrays_hold_integers() -> None:
    d = doc()
    d["steps"][3]["metrics"]["completion_token_ids"] = [1, "2", 3.5, 4, 5]
    errors = validate_trajectory(d)
    assert [(e.rule, e.path) for e in errors] == [
        ("type", "steps[3].metrics.completion_token_ids[1]")
    ]
    assert "1 more" in errors[0].message


def test_total_steps_must_match_unless_notes_explain() -> None:
    d = doc()
    d["final_metrics"]["total_steps"] = 99
    assert found(d) == [("total-steps-mismatch", "final_metrics.total_steps")]
    d["notes"] = "95 steps were dropped by the exporter"
    assert found(d) == []


# --- rule 25: unknown keys --------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "path"),
    [
        ((), "role"),
        (("agent",), "agent.role"),
        (("steps", 0), "steps[0].role"),
        (("steps", 2, "tool_calls", 0), "steps[2].tool_calls[0].role"),
        (("steps", 2, "observation"), "steps[2].observation.role"),
        (("steps", 2, "observation", "results", 0), "steps[2].observation.results[0].role"),
        (("steps", 3, "metrics"), "steps[3].metrics.role"),
        (("final_metrics",), "final_metrics.role"),
    ],
)
def test_unknown_fields(where: tuple[Any, ...], path: str) -> None:
    d = doc()
    node: Any = d
    for part in where:
        node = node[part]
    node["role"] = "x"
    assert found(d) == [("unknown-field", path)]


def test_unknown_field_with_odd_name_gets_a_quoted_path() -> None:
    d = doc()
    d["steps"][0]["my key"] = 1
    assert found(d) == [("unknown-field", 'steps[0]["my key"]')]


# --- rule 26: context management ----------------------------------------------------------


def compaction(boundary: str = "replace", with_content: bool = True) -> dict[str, Any]:
    step: dict[str, Any] = {
        "step_id": 5,
        "source": "system",
        "message": "",
        "extra": {"context_management": {"type": "compaction", "boundary": boundary}},
    }
    if with_content:
        step["observation"] = {"results": [{"content": "summary of steps 1-4"}]}
    return step


def test_context_management_valid() -> None:
    d = doc()
    d["steps"].append(compaction())
    del d["final_metrics"]
    assert found(d) == []


def test_context_management_rules() -> None:
    d = doc()
    del d["final_metrics"]
    d["steps"].append(compaction(with_content=False))
    bad_shape = compaction("append")
    bad_shape.update(step_id=6, extra={"context_management": "compacted"})
    agent_step = compaction("append")
    agent_step.update(step_id=7, source="agent")
    d["steps"] += [bad_shape, agent_step]
    assert found(d) == [
        ("context-management-replace-without-content", "steps[4].extra.context_management"),
        ("context-management-shape", "steps[5].extra.context_management"),
        ("context-management-not-system", "steps[6].extra.context_management"),
    ]


# --- many problems at once -------------------------------------------------------------


def test_every_problem_is_reported() -> None:
    d = doc()
    d["schema_version"] = "ATIF-v9"
    del d["agent"]["version"]
    d["steps"][0]["metrics"] = {"prompt_tokens": 1}
    d["steps"][1]["step_id"] = 7
    d["steps"][2]["tool_calls"][0]["arguments"] = []
    d["steps"][2]["observation"]["results"][0]["source_call_id"] = "call_2"
    d["steps"][3]["source"] = "assistant"
    d["final_metrics"]["total_steps"] = "4"
    d["surprise"] = True
    assert found(d) == [
        ("schema-version-unknown", "schema_version"),
        ("unknown-field", "surprise"),
        ("required", "agent.version"),
        ("agent-only-field", "steps[0].metrics"),
        ("step-id-sequence", "steps[1].step_id"),
        ("type", "steps[2].tool_calls[0].arguments"),
        ("observation-refers-to-unknown-call", "steps[2].observation.results[0].source_call_id"),
        ("step-source-unknown", "steps[3].source"),
        ("type", "final_metrics.total_steps"),
    ]
    with pytest.raises(AtifValidationError) as info:
        parse_trajectory(d)
    assert len(info.value.errors) == 9
    assert "[step-id-sequence]" in str(info.value)


def test_every_error_message_names_path_and_fix() -> None:
    d = doc()
    d["steps"][3]["role"] = "x"
    (error,) = validate_trajectory(d)
    assert "`role`" in error.message
    assert "extra" in error.message


# --- garbage in -----------------------------------------------------------------------------


@pytest.mark.parametrize("junk", [None, 0, 1.5, True, "trajectory", [], [EXAMPLE], b"{}"])
def test_not_an_object(junk: object) -> None:
    errors = validate_trajectory(junk)
    assert [(e.rule, e.path) for e in errors] == [("type", "")]


JUNK: list[object] = [
    None,
    True,
    -3,
    2.5,
    float("nan"),
    "",
    "x",
    [],
    [None],
    {},
    {"a": [1]},
    {1: 2},
]


def _paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def test_junk_at_every_position_gives_errors_never_exceptions() -> None:
    """Replace each value of the example with each junk value: the validator must not raise,
    and whenever it finds nothing wrong the typed decode must succeed too."""
    checked = 0
    for path in _paths(EXAMPLE):
        for junk in JUNK:
            d = doc()
            node: Any = d
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = copy.deepcopy(junk)
            errors = validate_trajectory(d)
            assert all(isinstance(e, AtifError) and e.rule and e.message for e in errors)
            if errors:
                with pytest.raises(AtifValidationError):
                    parse_trajectory(d)
            else:
                parse_trajectory(d)
            checked += 1
    assert checked > 1000


def test_wrong_types_at_every_level() -> None:
    d = {
        "schema_version": 1.8,
        "agent": {"name": [], "version": {}, "model_name": 3, "tool_definitions": "all"},
        "steps": [
            None,
            {"step_id": None, "source": 1, "message": 5, "tool_calls": {}, "observation": []},
            {
                "step_id": 3,
                "source": "agent",
                "message": [7],
                "tool_calls": [{"tool_call_id": 1, "function_name": None, "arguments": "x"}],
                "observation": {"results": [{"source_call_id": 1, "content": {}}]},
                "metrics": {"prompt_tokens": "many", "logprobs": "x"},
                "extra": [],
            },
        ],
        "final_metrics": [],
        "subagent_trajectories": [5, {"steps": 0}],
    }
    errors = validate_trajectory(d)
    paths = {e.path for e in errors}
    for expected in [
        "schema_version",
        "agent.name",
        "agent.version",
        "agent.model_name",
        "agent.tool_definitions",
        "steps[0]",
        "steps[1].step_id",
        "steps[1].source",
        "steps[1].message",
        "steps[1].tool_calls",
        "steps[1].observation",
        "steps[2].message[0]",
        "steps[2].tool_calls[0].tool_call_id",
        "steps[2].tool_calls[0].function_name",
        "steps[2].tool_calls[0].arguments",
        "steps[2].observation.results[0].source_call_id",
        "steps[2].observation.results[0].content",
        "steps[2].metrics.prompt_tokens",
        "steps[2].metrics.logprobs",
        "steps[2].extra",
        "final_metrics",
        "subagent_trajectories[0]",
        "subagent_trajectories[1].steps",
        "subagent_trajectories[1].agent",
    ]:
        assert expected in paths, expected


def test_deeply_nested_junk() -> None:
    deep: Any = "bottom"
    for _ in range(5000):
        deep = [{"x": deep}]
    d = doc()
    d["steps"][1]["message"] = deep
    d["steps"][2]["observation"]["results"] = deep
    d["agent"]["extra"] = {"deep": deep}
    rules = found(d)
    assert ("type", "steps[1].message[0].type") not in rules
    assert ("required", "steps[1].message[0].type") in rules
    assert ("unknown-field", "steps[2].observation.results[0].x") in rules


def test_bad_json_bytes() -> None:
    for data in [b"", b"{", b"\xff", b"[" * 100_000 + b"]" * 100_000, "nope"]:
        with pytest.raises(AtifValidationError) as info:
            parse_trajectory(data)
        assert [e.rule for e in info.value.errors] == ["json-invalid"]


def test_non_string_keys_from_python_input() -> None:
    d = doc()
    d["steps"][0][7] = "x"
    d["steps"][2]["tool_calls"][0]["arguments"] = {1: "x"}
    assert found(d) == [
        ("type", 'steps[0]["7"]'),
        ("type", "steps[2].tool_calls[0].arguments"),
    ]


# --- JSON Schema ----------------------------------------------------------------------------


def test_json_schema() -> None:
    schema = trajectory_json_schema()
    defs = schema["$defs"]
    assert schema["$ref"] == "#/$defs/Trajectory"
    assert set(defs["Trajectory"]["required"]) == {"schema_version", "agent", "steps"}
    assert defs["Trajectory"]["additionalProperties"] is False
    assert defs["Step"]["properties"]["source"]["enum"] == ["agent", "system", "user"]
    assert "ATIF-v1.8" in defs["Trajectory"]["properties"]["schema_version"]["enum"]
    msgspec.json.encode(schema)


# --- summary --------------------------------------------------------------------------------


def test_summary_of_example() -> None:
    s = summarize(parse_trajectory(doc()))
    assert (s.steps, s.agent_steps, s.tool_calls) == (4, 2, 1)
    assert s.tool_names == ["read_file"]
    assert s.model_names == ["example-model-1"]
    assert (s.prompt_tokens, s.completion_tokens, s.cached_tokens) == (470, 41, 350)
    assert s.cost_usd == pytest.approx(0.00063)
    assert s.duration_seconds == 5.0
    assert s.has_reasoning
    assert not s.has_multimodal
    assert s.subagents == 0


def test_summary_without_final_metrics_sums_steps() -> None:
    d = doc()
    del d["final_metrics"]
    d["steps"][0]["timestamp"] = "2026-01-05T08:59:00"  # naive: taken as UTC
    s = summarize(parse_trajectory(d))
    assert (s.prompt_tokens, s.completion_tokens, s.cached_tokens) == (470, 41, 350)
    assert s.cost_usd == pytest.approx(0.00063)
    assert s.duration_seconds == 65.0


def test_summary_of_bare_trajectory() -> None:
    s = summarize(parse_trajectory(child("x")))
    assert (s.steps, s.agent_steps, s.tool_calls) == (1, 0, 0)
    assert s.prompt_tokens is None
    assert s.cost_usd is None
    assert s.duration_seconds is None
    assert not s.has_reasoning


# --- public surface ---------------------------------------------------------------------------


def test_all_is_sorted_and_complete() -> None:
    names = evalkit.atif.__all__

    def isort_style(name: str) -> tuple[int, str]:  # constants, then classes, then functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert names == sorted(names, key=isort_style)
    for name in names:
        assert hasattr(evalkit.atif, name)
