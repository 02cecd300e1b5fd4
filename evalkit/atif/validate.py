"""Validate ATIF documents and report every broken rule, each with a JSON path and rule id.

:func:`validate_trajectory` walks the decoded JSON itself (rather than stopping at the
first decode error), so one call lists all type, shape and cross-field problems.
:func:`validate_json` does the same walk over JSON text while holding one step's decoded
objects at a time, and :func:`parse_trajectory` validates and then builds the typed
:class:`Trajectory`.

The rules follow the reference implementation (Harbor) and add the checks its format
description asks for but it leaves out: unique tool call ids, refs that resolve, sane
metrics, ``total_steps`` matching the steps, and fields newer than the declared version.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from evalkit.atif import _content
from evalkit.atif._shape import AtifError, Field, Report, at, check_object, key
from evalkit.atif.model import LATEST_SCHEMA_VERSION, SCHEMA_VERSIONS, Trajectory

__all__ = [
    "AtifError",
    "AtifValidationError",
    "parse_trajectory",
    "trajectory_json_schema",
    "validate_json",
    "validate_trajectory",
]

# Embedded subagents deeper than this are not walked (guards against runaway input).
MAX_SUBAGENT_DEPTH: Final = 16

_TRAJECTORY: Final = {
    "schema_version": Field("string", required=True),
    "session_id": Field("string"),
    "trajectory_id": Field("string", since=7),
    "agent": Field("node", required=True),
    "steps": Field("array", required=True),
    "notes": Field("string"),
    "final_metrics": Field("node"),
    "continued_trajectory_ref": Field("string", since=5),
    "extra": Field("object", since=1),
    "subagent_trajectories": Field("array", since=7),
}
_AGENT: Final = {
    "name": Field("string", required=True),
    "version": Field("string", required=True),
    "model_name": Field("string"),
    "tool_definitions": Field("object[]", since=5),
    "extra": Field("object"),
}
_STEP: Final = {
    "step_id": Field("integer", required=True),
    "timestamp": Field("string"),
    "source": Field("string", required=True),
    "model_name": Field("string"),
    "reasoning_effort": Field("string|number"),
    "message": Field("message", required=True),
    "reasoning_content": Field("string"),
    "tool_calls": Field("array"),
    "observation": Field("node"),
    "metrics": Field("node"),
    "llm_call_count": Field("integer", since=7, nonneg=True),
    "is_copied_context": Field("boolean", since=5),
    "extra": Field("object"),
}
_TOOL_CALL: Final = {
    "tool_call_id": Field("string", required=True),
    "function_name": Field("string", required=True),
    "arguments": Field("object", required=True),
    "extra": Field("object", since=7),
}
_OBSERVATION: Final = {"results": Field("array", required=True)}
_RESULT: Final = {
    "source_call_id": Field("string"),
    "content": Field("message"),
    "subagent_trajectory_ref": Field("array"),
    "extra": Field("object", since=7),
}
_REF: Final = {
    "trajectory_id": Field("string", since=7),
    "trajectory_path": Field("string"),
    "session_id": Field("string"),
    "extra": Field("object"),
}
_METRICS: Final = {
    "prompt_tokens": Field("integer", nonneg=True),
    "completion_tokens": Field("integer", nonneg=True),
    "cached_tokens": Field("integer", nonneg=True),
    "cost_usd": Field("number", nonneg=True),
    "prompt_token_ids": Field("integer[]", since=4),
    "completion_token_ids": Field("integer[]", since=3),
    "logprobs": Field("number[]"),
    "extra": Field("object"),
}
_FINAL_METRICS: Final = {
    "total_prompt_tokens": Field("integer", nonneg=True),
    "total_completion_tokens": Field("integer", nonneg=True),
    "total_cached_tokens": Field("integer", nonneg=True),
    "total_cost_usd": Field("number", nonneg=True),
    "total_steps": Field("integer", nonneg=True),
    "extra": Field("object"),
}

_JSON: Final = msgspec.json.Decoder()
_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ITEMS: Final = msgspec.json.Decoder(list[msgspec.Raw])
_LISTS: Final = ("steps", "subagent_trajectories")
"""The members of a trajectory that :func:`validate_json` keeps as one undecoded JSON text
per element, decoded when the walk reaches it."""
_SOURCES: Final = ("system", "user", "agent")
_AGENT_ONLY: Final = (
    "model_name",
    "reasoning_effort",
    "reasoning_content",
    "tool_calls",
    "metrics",
)


class AtifValidationError(ValueError):
    """Raised by :func:`parse_trajectory`; ``errors`` lists every broken rule."""

    def __init__(self, errors: list[AtifError]) -> None:
        self.errors = errors
        shown = "\n".join(
            f"  {e.path or '(document)'}: [{e.rule}] {e.message}" for e in errors[:20]
        )
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        super().__init__(f"invalid ATIF trajectory ({len(errors)} problems):\n{shown}{more}")


@dataclass
class _Doc:
    """Whole-document state: embedded ids and refs are resolved once the walk is done."""

    report: Report
    base_dir: Path | None
    embedded_ids: set[str] = field(default_factory=set)
    refs: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Traj:
    """State of one trajectory (root or embedded): tool call ids seen so far."""

    call_ids: dict[str, str] = field(default_factory=dict)


def validate_trajectory(
    doc: object, *, base_dir: str | os.PathLike[str] | None = None
) -> list[AtifError]:
    """Return every rule ``doc`` (decoded JSON) breaks; an empty list means valid.

    With ``base_dir`` (the directory of the trajectory file), local image and audio
    paths are also checked to exist.
    """
    state = _Doc(report=Report(), base_dir=Path(base_dir) if base_dir is not None else None)
    _trajectory(state, doc, "", depth=0)
    for path, ref_id in state.refs:
        if ref_id not in state.embedded_ids:
            state.report.add(
                path,
                "subagent-ref-unknown-trajectory",
                f"no embedded subagent trajectory has trajectory_id {ref_id!r}; add that "
                "trajectory to `subagent_trajectories`, fix the id, or give the ref a "
                "`trajectory_path` to an external file",
            )
    return state.report.errors


def validate_json(
    data: bytes | str, *, base_dir: str | os.PathLike[str] | None = None
) -> list[AtifError]:
    """``validate_trajectory(msgspec.json.decode(data))``, without holding the decoded
    document: the steps (and embedded subagent trajectories) stay views of ``data`` until
    the walk reaches them, and each is dropped once walked. Raises what decoding ``data``
    raises (``msgspec.DecodeError``, ``RecursionError``, ``UnicodeDecodeError`` for bytes
    that are not UTF-8) when it is not JSON, whichever part of it is broken.
    """
    try:
        return validate_trajectory(_open_document(data), base_dir=base_dir)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        # Some part does not decode: decode it whole, so the error is the one decoding
        # the whole text gives (and, should it decode after all, validate it whole).
        return validate_trajectory(_JSON.decode(data), base_dir=base_dir)


def parse_trajectory(
    data: bytes | str | dict[str, Any], *, base_dir: str | os.PathLike[str] | None = None
) -> Trajectory:
    """Decode (if needed), validate and convert ``data``; raise AtifValidationError if invalid.

    ``base_dir`` is passed on to :func:`validate_trajectory` (media file checks). JSON text
    is validated with :func:`validate_json` and then decoded straight into the Structs, so
    no generic decoded copy of it is held.
    """
    if isinstance(data, bytes | str):
        try:
            errors = validate_json(data, base_dir=base_dir)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
            raise AtifValidationError(
                [
                    AtifError(
                        "",
                        "json-invalid",
                        f"the trajectory is not valid JSON ({exc}); send one UTF-8 JSON object",
                    )
                ]
            ) from None
    else:
        errors = validate_trajectory(data, base_dir=base_dir)
    if errors:
        raise AtifValidationError(errors)
    try:
        if isinstance(data, bytes | str):
            return _TYPED.decode(data)
        return msgspec.convert(data, Trajectory)
    except msgspec.ValidationError as exc:  # a gap between the walker and the Structs
        text = str(exc)
        path = text.rsplit(" - at `$", 1)[1].rstrip("`").lstrip(".") if " - at `$" in text else ""
        raise AtifValidationError([AtifError(path, "type", text)]) from None


_TYPED: Final = msgspec.json.Decoder(Trajectory)


def trajectory_json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of an accepted ATIF document, generated from the Structs.

    Cross-field rules (numbering, linkage, agent-only fields...) cannot be expressed in
    JSON Schema; :func:`validate_trajectory` is the full check.
    """
    schema = msgspec.json.schema(Trajectory)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ATIF trajectory accepted by evalkit",
        **schema,
    }


# --- lazily decoded documents ---------------------------------------------------------


def _open_document(data: bytes | str | msgspec.Raw) -> object:
    """A trajectory's JSON as the walker reads it: each member decoded, except the elements
    of ``steps`` and ``subagent_trajectories``, which stay ``msgspec.Raw`` views of ``data``
    (see :func:`_opened`). Anything that is not an object is decoded as it is."""
    try:
        members = _MEMBERS.decode(data)
    except msgspec.ValidationError:  # valid JSON, not an object
        return _JSON.decode(data)
    return {name: _open_member(name, raw) for name, raw in members.items()}


def _open_member(name: str, raw: msgspec.Raw) -> object:
    if name in _LISTS:
        try:
            return _ITEMS.decode(raw)
        except msgspec.ValidationError:  # not an array: the walker says so
            pass
    return _JSON.decode(raw)


def _opened(node: object) -> object:
    """An element of ``steps`` decoded, or of ``subagent_trajectories`` opened, when the walk
    reaches it (``validate_trajectory``'s input holds decoded JSON and passes through)."""
    return _JSON.decode(node) if isinstance(node, msgspec.Raw) else node


def _decode_rest(node: object) -> None:
    """Decode what the walk leaves out (subagents nested too deep), so that a document whose
    text does not decode fails as its whole text does."""
    if isinstance(node, msgspec.Raw):
        _JSON.decode(node)
    elif isinstance(node, dict):
        for name in _LISTS:
            items = node.get(name)
            if isinstance(items, list):
                for item in items:
                    _decode_rest(item)


# --- walkers -------------------------------------------------------------------------


def _set_version(report: Report, node: object, path: str) -> None:
    """Read the declared version before the walk so newer fields can be flagged."""
    report.version, report.version_label = 8, LATEST_SCHEMA_VERSION
    if not isinstance(node, dict):
        return
    label = node.get("schema_version")
    if not isinstance(label, str):
        return
    if label not in SCHEMA_VERSIONS:
        report.add(
            key(path, "schema_version"),
            "schema-version-unknown",
            f"`schema_version` is {label!r}, which is not an ATIF version this validator "
            f"knows; use one of {', '.join(SCHEMA_VERSIONS)} ({LATEST_SCHEMA_VERSION} is "
            "the latest)",
        )
        return
    report.version, report.version_label = SCHEMA_VERSIONS.index(label), label


def _trajectory(state: _Doc, node: object, path: str, depth: int) -> None:
    report = state.report
    if depth > MAX_SUBAGENT_DEPTH:
        _decode_rest(node)
        report.add(
            path,
            "nesting-too-deep",
            f"embedded subagents are nested more than {MAX_SUBAGENT_DEPTH} levels deep; "
            "flatten them into the root's `subagent_trajectories`",
        )
        return
    saved = report.version, report.version_label
    _set_version(report, node, path)
    what = "the trajectory" if not path else "an embedded subagent trajectory"
    t = check_object(report, node, path, _TRAJECTORY, what)
    if t is not None:
        _trajectory_body(state, t, node, path, depth)
    report.version, report.version_label = saved


def _trajectory_body(
    state: _Doc, t: dict[str, Any], node: dict[str, Any], path: str, depth: int
) -> None:
    report = state.report
    if depth == 0 and report.version < 7 and node.get("session_id") is None:
        report.add(
            key(path, "session_id"),
            "session-id-required",
            f"`session_id` is required up to ATIF-v1.6 and this document declares "
            f"{report.version_label}; add the run's session id, or declare ATIF-v1.7 or "
            "later, where it is optional",
        )
    if "agent" in t:
        check_object(report, t["agent"], key(path, "agent"), _AGENT, "the agent")
    steps_path = key(path, "steps")
    steps = t.get("steps")
    if steps is not None:
        if not steps:
            report.add(
                steps_path,
                "steps-empty",
                "`steps` is empty; a trajectory needs at least one step (for example the "
                "user's request)",
            )
        traj = _Traj()
        for i, step in enumerate(steps):
            _step(state, traj, _opened(step), at(steps_path, i), i)
    if "final_metrics" in t:
        _final_metrics(report, t, key(path, "final_metrics"), steps)
    if "subagent_trajectories" in t:
        _subagents(state, t["subagent_trajectories"], key(path, "subagent_trajectories"), depth)


def _subagents(state: _Doc, children: list[Any], path: str, depth: int) -> None:
    report = state.report
    first_seen: dict[str, str] = {}
    for i, item in enumerate(children):
        cpath = at(path, i)
        child = _open_document(item) if isinstance(item, msgspec.Raw) else item
        if isinstance(child, dict):
            tid = child.get("trajectory_id")
            if tid is None:
                report.add(
                    key(cpath, "trajectory_id"),
                    "embedded-subagent-id-required",
                    "every embedded subagent trajectory needs a `trajectory_id`, which refs "
                    "use to find it; add a unique id",
                )
            elif isinstance(tid, str):
                if tid in first_seen:
                    report.add(
                        key(cpath, "trajectory_id"),
                        "embedded-subagent-id-unique",
                        f"trajectory_id {tid!r} is already used by {first_seen[tid]}; give "
                        "each embedded subagent its own id",
                    )
                else:
                    first_seen[tid] = cpath
                state.embedded_ids.add(tid)
        _trajectory(state, child, cpath, depth + 1)


def _step(state: _Doc, traj: _Traj, node: object, path: str, index: int) -> None:
    report = state.report
    s = check_object(report, node, path, _STEP, "a step")
    if s is None or not isinstance(node, dict):
        return
    step_id = s.get("step_id")
    if step_id is not None and step_id != index + 1:
        report.add(
            key(path, "step_id"),
            "step-id-sequence",
            f"`step_id` is {step_id}, but step ids count up from 1 in array order with no "
            f"gaps, so this step (index {index}) must be {index + 1}; renumber the steps",
        )
    source = s.get("source")
    if source is not None and source not in _SOURCES:
        report.add(
            key(path, "source"),
            "step-source-unknown",
            f"`source` is {source!r}; it must be 'system', 'user' or 'agent' (tool output "
            "goes in the agent step's `observation`)",
        )
    if "timestamp" in s:
        _content.check_timestamp(report, s["timestamp"], key(path, "timestamp"))
    if source in ("system", "user"):
        for name in _AGENT_ONLY:
            if node.get(name) is not None:
                report.add(
                    key(path, name),
                    "agent-only-field",
                    f"`{name}` belongs on agent steps only, but this is a {source} step; "
                    "remove it, or set `source` to 'agent' if the model produced this step",
                )
    if source == "system" and "observation" in s and report.version < 2:
        report.add(
            key(path, "observation"),
            "field-requires-newer-version",
            f"observations on system steps were added in ATIF-v1.2, but this document "
            f"declares {report.version_label}; declare ATIF-v1.2 or later, or drop it",
        )
    if "message" in s:
        _content.check_message(report, s["message"], key(path, "message"), state.base_dir)
    call_ids: set[str] = set()
    if "tool_calls" in s:
        for i, call in enumerate(s["tool_calls"]):
            _tool_call(report, traj, call, at(key(path, "tool_calls"), i), call_ids)
    if "observation" in s:
        _observation(state, traj, s["observation"], key(path, "observation"), call_ids)
    if "metrics" in s:
        _metrics(report, s["metrics"], key(path, "metrics"))
    if s.get("llm_call_count") == 0 and source == "agent":
        for name in ("metrics", "reasoning_content"):
            if node.get(name) is not None:
                report.add(
                    key(path, name),
                    "llm-call-count-zero-with-llm-data",
                    f"`llm_call_count` is 0 (a scripted, non-LLM step), so the step cannot "
                    f"carry `{name}`; remove `{name}` or set `llm_call_count` to the number "
                    "of LLM calls",
                )
    if "extra" in s and "context_management" in s["extra"]:
        _content.check_context_management(report, s, path, source)


def _tool_call(report: Report, traj: _Traj, node: object, path: str, call_ids: set[str]) -> None:
    c = check_object(report, node, path, _TOOL_CALL, "a tool call")
    if c is None or "tool_call_id" not in c:
        return
    call_id = c["tool_call_id"]
    id_path = key(path, "tool_call_id")
    if call_id in traj.call_ids:
        report.add(
            id_path,
            "tool-call-id-unique",
            f"tool_call_id {call_id!r} is already used by {traj.call_ids[call_id]}; "
            "give every tool call in the trajectory its own id",
        )
    else:
        traj.call_ids[call_id] = id_path
    call_ids.add(call_id)


def _observation(
    state: _Doc, traj: _Traj, node: dict[str, Any], path: str, call_ids: set[str]
) -> None:
    report = state.report
    o = check_object(report, node, path, _OBSERVATION, "an observation")
    if o is None or "results" not in o:
        return
    for i, result in enumerate(o["results"]):
        rpath = at(key(path, "results"), i)
        r = check_object(report, result, rpath, _RESULT, "an observation result")
        if r is None:
            continue
        call_id = r.get("source_call_id")
        if call_id is not None and call_id not in call_ids:
            elsewhere = traj.call_ids.get(call_id)
            hint = (
                f"it matches {elsewhere}, in another step; a result must sit in the same "
                "step as its call, so move it there"
                if elsewhere
                else "set it to the tool_call_id of a call in this step, or to null if the "
                "output did not come from a tool call"
            )
            report.add(
                key(rpath, "source_call_id"),
                "observation-refers-to-unknown-call",
                f"source_call_id {call_id!r} names no tool call of this step; {hint}",
            )
        if "content" in r:
            _content.check_message(report, r["content"], key(rpath, "content"), state.base_dir)
        for j, ref in enumerate(r.get("subagent_trajectory_ref", [])):
            _ref(state, ref, at(key(rpath, "subagent_trajectory_ref"), j))


def _ref(state: _Doc, node: object, path: str) -> None:
    ref = check_object(state.report, node, path, _REF, "a subagent trajectory ref")
    if ref is None:
        return
    if "trajectory_id" not in ref and "trajectory_path" not in ref:
        state.report.add(
            path,
            "subagent-ref-unresolvable",
            "a subagent ref needs `trajectory_id` (of an embedded subagent) or "
            "`trajectory_path` (an external file); `session_id` alone cannot be resolved "
            "since ATIF-v1.7",
        )
    elif "trajectory_path" not in ref:
        state.refs.append((key(path, "trajectory_id"), ref["trajectory_id"]))


def _metrics(report: Report, node: dict[str, Any], path: str) -> None:
    m = check_object(report, node, path, _METRICS, "step metrics")
    if m is None:
        return
    _cached_within_prompt(report, m, path, "cached_tokens", "prompt_tokens")
    ids, logprobs = m.get("completion_token_ids"), m.get("logprobs")
    if ids is not None and logprobs is not None and len(ids) != len(logprobs):
        report.add(
            key(path, "logprobs"),
            "logprobs-length-mismatch",
            f"`logprobs` has {len(logprobs)} values but `completion_token_ids` has "
            f"{len(ids)}; give exactly one logprob per generated token id",
        )


def _final_metrics(report: Report, t: dict[str, Any], path: str, steps: object) -> None:
    m = check_object(report, t["final_metrics"], path, _FINAL_METRICS, "the final metrics")
    if m is None:
        return
    _cached_within_prompt(report, m, path, "total_cached_tokens", "total_prompt_tokens")
    total = m.get("total_steps")
    if total is not None and isinstance(steps, list) and total != len(steps) and not t.get("notes"):
        report.add(
            key(path, "total_steps"),
            "total-steps-mismatch",
            f"`total_steps` is {total} but the trajectory has {len(steps)} steps; fix the "
            "count, or explain the difference in the root `notes`",
        )


def _cached_within_prompt(
    report: Report, m: dict[str, Any], path: str, cached: str, prompt: str
) -> None:
    if cached in m and prompt in m and m[cached] > m[prompt]:
        report.add(
            key(path, cached),
            "cached-tokens-exceed-prompt",
            f"`{cached}` ({m[cached]}) is larger than `{prompt}` ({m[prompt]}); cached "
            f"tokens are the part of {prompt} served from cache, so {prompt} must include "
            "them",
        )
