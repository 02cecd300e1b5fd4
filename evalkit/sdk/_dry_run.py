"""dry_run: call the task on a case or a few, with no experiment, and show what the server
makes of each run's session (the spans it got and the trajectory its mapping builds)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import msgspec

from evalkit.cases.suite import apply_overlay
from evalkit.model import datasets as dwire
from evalkit.model.agents import Agent
from evalkit.model.harness import InputFile
from evalkit.model.otel import TraceSessionDetail
from evalkit.sdk import tracing
from evalkit.sdk._binding import Binding, normalize
from evalkit.sdk._evaluators import PythonEvaluator, score_run
from evalkit.sdk._fixtures import FixtureCache
from evalkit.sdk._link import SdkLink
from evalkit.sdk._model import DryRunCase, EvalRun, RunResult, ScoreItem, SdkError
from evalkit.sdk._progress import Waiting

QUIET_SECONDS = 1.0
"""A session counts as settled when no span arrived for this long."""


async def dry_run_cases(
    link: SdkLink,
    *,
    binding: Binding,
    evaluators: list[PythonEvaluator],
    dataset: str,
    agent: str,
    workspace: str | None,
    count: int,
    case_ids: list[str] | None,
    split: str | None,
    model: str | None,
    progress: bool = True,
) -> list[DryRunCase]:
    agent_name, agent_ws = await link.ref(agent, "agent")
    tracing.require_agent(f"{agent_name}@{agent_ws}")
    found: Agent = await link.get(f"/api/workspaces/{agent_ws}/agents/{agent_name}", Agent)
    if found.kind != "code":
        raise SdkError(
            f"agent {agent_name}@{agent_ws} has a harness, so evalkit calls it: check it with "
            f"`evalkit harness check {agent_name}@{agent_ws}` instead of a dry run"
        )
    cases = await _cases(link, dataset, count, case_ids, split)
    if model and not binding.takes_model:
        print(f"warning: model={model!r} is not passed to the task (it has no `model` parameter)")
    fixtures = FixtureCache(link)
    mapping: dict[str, Any] | None = None
    out = []
    for case_id, content, pins in cases:
        case = await _one(binding, fixtures, case_id, content, pins, model)
        print(f"case {case_id}: session {case.session_id}")
        if case.error:
            print(f"  the task failed: {case.error}")
        else:
            print(f"  answer: {_show(case.answer if case.answer is not None else case.output)}")
        given = case.trajectory
        if given is not None:
            _read_given(case, given)
        elif tracing.is_registered() or case.session_id != case.own_session:
            if mapping is None:
                mapping = await _mapping(link, agent_name, agent_ws)
            await _read_session(link, case, found, mapping, progress=progress)
        else:
            case.trajectory_error = (
                "nothing traces this process (tracing.register) and the task returned no trajectory"
            )
            print(f"  no trajectory: {case.trajectory_error}")
        if evaluators and case.error is None:
            await _score(case, content, evaluators, model)
        out.append(case)
    return out


async def _cases(
    link: SdkLink, dataset: str, count: int, case_ids: list[str] | None, split: str | None
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(case id, effective content, fixture pins) of the first ``count`` live cases."""
    name, ws = dataset.split("@", 1)
    listed = await link.get(f"/api/workspaces/{ws}/datasets/{name}/cases", list[dwire.CaseSummary])
    live = [c for c in listed if not c.removed]
    if case_ids:
        known = {c.id for c in live}
        unknown = [c for c in case_ids if c not in known]
        if unknown:
            raise SdkError(f"dataset {dataset} has no case {', '.join(map(repr, unknown))}")
        live = [c for c in live if c.id in set(case_ids)]
    chosen = []
    for summary in live:
        detail = await link.get(f"/api/workspaces/{ws}/cases/{summary.id}", dwire.CaseDetail)
        content = detail.content
        pins = dict(detail.versions[0].fixtures) if detail.versions else {}
        if summary.overlay_target:
            target = await link.get(
                f"/api/workspaces/{ws}/cases/{summary.overlay_target}", dwire.CaseDetail
            )
            content = apply_overlay(target.content, content)
            target_pins = dict(target.versions[0].fixtures) if target.versions else {}
            pins = {**target_pins, **pins}
        if split is not None and content.get("split") != split:
            continue
        chosen.append((summary.id, content, pins))
        if len(chosen) >= count:
            break
    if not chosen:
        which = f" in split {split!r}" if split else ""
        raise SdkError(f"dataset {dataset} has no cases to run{which}")
    return chosen


async def _one(
    binding: Binding,
    fixtures: FixtureCache,
    case_id: str,
    content: dict[str, Any],
    pins: dict[str, Any],
    model: str | None,
) -> DryRunCase:
    case_input = dict(content.get("input") or {})
    keys = [str(k) for k in case_input.pop("files", None) or []]
    files = [
        InputFile(
            name=key,
            sha256=pins[key]["sha256"],
            size=pins[key]["size"],
            context=pins[key].get("context"),
        )
        for key in keys
        if key in pins
    ]
    session_id = str(uuid.uuid4())
    metadata = {
        "session_id": session_id,
        "experiment_id": None,
        "case_id": case_id,
        "repetition": 1,
        "tags": list(content.get("tags") or []),
    }
    case = DryRunCase(case_id=case_id, session_id=session_id, own_session=session_id)
    result: RunResult | None = None
    error: BaseException | None = None
    with tracing.run_span(session_id, metadata, case_input, dry_run=True) as span:
        try:
            values = {
                "input": case_input,
                "files": await fixtures.files(files),
                "model": model,
                "metadata": metadata,
            }
            result = normalize(await binding.call(values))
        except Exception as exc:
            error = exc
        span.finish(result, error)
    if error is not None:
        case.error = f"{type(error).__name__}: {error}"
        return case
    assert result is not None
    case.answer, case.output = result.answer, result.output
    if result.session_id:
        case.session_id = result.session_id  # read it even when this process does not trace
    if result.trajectory is not None:
        case.trajectory = (
            json.loads(result.trajectory)
            if isinstance(result.trajectory, str)
            else result.trajectory
        )
    return case


def _read_given(case: DryRunCase, given: dict[str, Any]) -> None:
    from evalkit.atif.validate import validate_trajectory

    errors = validate_trajectory(given)
    if errors:
        case.trajectory, case.trajectory_error = (
            None,
            "; ".join(f"{e.path or '/'}: {e.message}" for e in errors[:3]),
        )
        print(f"  trajectory read failed: not valid ATIF: {case.trajectory_error}")
        return
    print(f"  trajectory (returned by the task): {_steps(given)}")


async def _mapping(link: SdkLink, name: str, ws: str) -> dict[str, Any] | None:
    try:
        answer = await link.get(f"/api/workspaces/{ws}/agents/{name}/mappings/active")
    except Exception:
        return None
    return answer.get("mapping")


async def _read_session(
    link: SdkLink,
    case: DryRunCase,
    agent: Agent,
    mapping: dict[str, Any] | None,
    *,
    progress: bool = True,
) -> None:
    """Wait for the session's spans to settle, then build its trajectory as the server's
    settle job would (same builder, the agent's active mapping)."""
    from evalkit.otel.build import build_trajectory
    from evalkit.otel.mapping import parse_mapping

    if tracing.is_registered():
        await asyncio.to_thread(tracing.flush)
    path = f"/api/workspaces/{agent.workspace}/agents/{agent.name}/sessions/{case.session_id}"
    limit = max(agent.trajectory_wait, QUIET_SECONDS * 2)
    deadline = time.monotonic() + limit
    detail: TraceSessionDetail | None = None
    last = None
    quiet_since = time.monotonic()
    waiting = Waiting(enabled=progress)
    what = f"spans of session {case.session_id} (case {case.case_id})"
    while time.monotonic() < deadline:
        waiting.update(what, limit=limit)
        try:
            detail = await link.get(path, TraceSessionDetail)
        except Exception:
            detail = None
        seen = detail.session.span_count if detail else None
        if seen != last:
            last, quiet_since = seen, time.monotonic()
        elif detail is not None and time.monotonic() - quiet_since >= QUIET_SECONDS:
            break
        await asyncio.sleep(0.25)
    waiting.close("no spans arrived" if detail is None else f"{last} spans arrived")
    if detail is None:
        case.trajectory_error = (
            f"no span of session {case.session_id} reached the server within "
            f"{agent.trajectory_wait:g} s; check the exporter (tracing.register) and the token"
        )
        print(f"  trajectory read failed: {case.trajectory_error}")
        return
    case.spans = len(detail.spans)
    if mapping is None:
        case.trajectory_error = "the agent has no active span mapping (`evalkit agents mapping`)"
        print(f"  trajectory read failed: {case.trajectory_error}")
        return
    try:
        built = build_trajectory(
            detail.spans,
            parse_mapping(mapping),
            session_id=case.session_id,
            agent_name=agent.name,
            truncated=detail.session.truncated,
        )
    except Exception as exc:
        case.trajectory_error = f"{type(exc).__name__}: {exc}"
        print(f"  trajectory read failed: {case.trajectory_error}")
        return
    case.trajectory = msgspec.to_builtins(built.trajectory)
    print(f"  session: {case.spans} spans; trajectory: {_steps(case.trajectory)}")
    if built.answer is not None:
        print(f"  answer read from the spans: {_show(built.answer)}")
    for line in built.unread[:5]:
        print(f"  the mapping could not read: {line}")


async def _score(
    case: DryRunCase,
    content: dict[str, Any],
    evaluators: list[PythonEvaluator],
    model: str | None,
) -> None:
    run = EvalRun(
        id=f"dry-run:{case.case_id}",
        answer=case.answer,
        output=case.output,
        trajectory=case.trajectory,
        model=model,
        experiment_id=None,
    )
    for score in await score_run(evaluators, case.case_id, content, run):
        item = ScoreItem(
            name=score.name, score=score.value, explanation=score.explanation, kind=score.kind
        )
        case.scores.append(item)
        shown = "-" if score.value is None else f"{score.value:g}"
        why = score.error or score.skipped or score.explanation or ""
        print(f"  python:{score.evaluator} {score.name}: {shown}{'  ' + why if why else ''}")


def _steps(trajectory: dict[str, Any]) -> str:
    steps = trajectory.get("steps") or []
    calls = sum(len(s.get("tool_calls") or []) for s in steps)
    return f"{len(steps)} steps, {calls} tool calls"


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:197] + "..."
