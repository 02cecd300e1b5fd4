"""One run: its state, timings, answer and output, its scores with their explanations, and
the trajectory viewer (steps in order, reasoning, tool calls paired with their results,
per-step metrics and timing bars, the final metrics, and what makes it partial or invalid).

The trajectory is read defensively: an invalid document is stored as sent, so any field
may be missing or of the wrong type, and the viewer still shows what it can."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from starlette.responses import RedirectResponse, Response

from evalkit.edge.routes import experiments, labels, otel, run_list, scores
from evalkit.errors import NotFound
from evalkit.model.labels import LabelRequest
from evalkit.model.names import whole_number
from evalkit.model.runs import TERMINAL, Run
from evalkit.otel.missing import NOT_COLLECTED, NoSpans, awaited_spans, no_spans
from evalkit.web import charts
from evalkit.web.page import Page, WebCall, form_struct, use
from evalkit.web.pages.experiments import FMT, pager

STEP_PAGE = 200
"""Steps shown per page of a long trajectory."""
SUBAGENT_DEPTH = 3


@dataclass
class Part:
    kind: str
    """``text``, ``image``, ``audio`` or ``other``."""
    text: str


@dataclass
class CallView:
    id: str
    name: str
    arguments: str
    results: list[list[Part]] = field(default_factory=list)


@dataclass
class StepView:
    step_id: Any
    source: str
    message: list[Part]
    timestamp: str | None
    at: float | None
    """Seconds from the run's start."""
    span: charts.Span | None
    model: str | None
    reasoning: str | None
    reasoning_effort: Any
    calls: list[CallView]
    results: list[list[Part]]
    """Observation results that answer no tool call of the step."""
    metrics: dict[str, Any]
    llm_call_count: Any
    copied: bool
    extra: str | None


@dataclass
class TrajectoryView:
    agent: dict[str, Any]
    session_id: str | None
    notes: str | None
    total_steps: int
    steps: list[StepView]
    offset: int
    final_metrics: dict[str, Any]
    duration: float | None
    subagents: list[TrajectoryView]
    trajectory_id: str | None = None


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def content_parts(content: Any) -> list[Part]:
    """A message or observation content (text, or a list of content parts) as parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Part("text", content)]
    if not isinstance(content, list):
        return [Part("other", _json(content))]
    parts = []
    for item in content:
        item_d = _dict(item)
        kind = item_d.get("type")
        if kind == "text":
            parts.append(Part("text", str(item_d.get("text", ""))))
        elif kind in ("image", "audio"):
            source = _dict(item_d.get("source"))
            what = f"{source.get('media_type', kind)} {source.get('path', '')}".strip()
            parts.append(Part(str(kind), what))
        else:
            parts.append(Part("other", _json(item)))
    return parts


def trajectory_view(
    doc: Any,
    *,
    started: datetime | None,
    ended: datetime | None,
    offset: int = 0,
    depth: int = 0,
) -> TrajectoryView | None:
    """The trajectory as the viewer shows it: one page of steps from ``offset``."""
    if not isinstance(doc, dict):
        return None
    raw_steps = _list(doc.get("steps"))
    times = [_parse_time(_dict(s).get("timestamp")) for s in raw_steps]
    known = [t for t in times if t is not None]
    origin = known[0] if known else started
    if started is not None and known and started <= known[0]:
        origin = started
    finish = max(known) if known else None
    if ended is not None and (finish is None or ended > finish):
        finish = ended
    duration = (finish - origin).total_seconds() if origin and finish else None
    ats = [(t - origin).total_seconds() if t and origin else None for t in times]
    ends: list[float | None] = []
    for i, at in enumerate(ats):
        later = [a for a in ats[i + 1 :] if a is not None]
        ends.append(later[0] if later else at)
    bars = charts.spans(ats, ends, duration or 0.0)
    shown = range(offset, min(offset + STEP_PAGE, len(raw_steps)))
    steps = [_step(_dict(raw_steps[i]), ats[i], bars[i]) for i in shown]
    subagents = []
    if depth < SUBAGENT_DEPTH:
        for sub in _list(doc.get("subagent_trajectories")):
            view = trajectory_view(sub, started=None, ended=None, depth=depth + 1)
            if view is not None:
                subagents.append(view)
    return TrajectoryView(
        agent=_dict(doc.get("agent")),
        session_id=_text(doc.get("session_id")),
        notes=_text(doc.get("notes")),
        total_steps=len(raw_steps),
        steps=steps,
        offset=offset,
        final_metrics=_dict(doc.get("final_metrics")),
        duration=duration,
        subagents=subagents,
        trajectory_id=doc.get("trajectory_id")
        if isinstance(doc.get("trajectory_id"), str)
        else None,
    )


def _step(step: dict[str, Any], at: float | None, span: charts.Span | None) -> StepView:
    observation = _dict(step.get("observation"))
    results = [_dict(r) for r in _list(observation.get("results"))]
    calls = []
    answered: set[int] = set()
    for call in _list(step.get("tool_calls")):
        call_d = _dict(call)
        call_id = str(call_d.get("tool_call_id", ""))
        mine = [i for i, r in enumerate(results) if call_id and r.get("source_call_id") == call_id]
        answered.update(mine)
        calls.append(
            CallView(
                id=call_id,
                name=str(call_d.get("function_name", "?")),
                arguments=_json(call_d.get("arguments", {})),
                results=[_result(results[i]) for i in mine],
            )
        )
    loose = [_result(r) for i, r in enumerate(results) if i not in answered]
    extra = step.get("extra")
    return StepView(
        step_id=step.get("step_id"),
        source=str(step.get("source", "?")),
        message=content_parts(step.get("message")),
        timestamp=_text(step.get("timestamp")),
        at=at,
        span=span,
        model=_text(step.get("model_name")),
        reasoning=_text(step.get("reasoning_content")),
        reasoning_effort=step.get("reasoning_effort"),
        calls=calls,
        results=loose,
        metrics={
            k: v
            for k, v in _dict(step.get("metrics")).items()
            if k in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd")
        },
        llm_call_count=step.get("llm_call_count"),
        copied=step.get("is_copied_context") is True,
        extra=_json(extra) if extra else None,
    )


def _result(result: dict[str, Any]) -> list[Part]:
    parts = content_parts(result.get("content"))
    refs = _list(result.get("subagent_trajectory_ref"))
    for ref in refs:
        ref_d = _dict(ref)
        target = ref_d.get("trajectory_id") or ref_d.get("trajectory_path") or "?"
        parts.append(Part("other", f"delegated to subagent {target}"))
    return parts


async def run_page(call: WebCall) -> Response:
    run_id = call.param("run")
    run = await use(call, experiments.runs_show, params={"run": run_id}, query={"trajectory": "1"})
    found = await use(call, scores.run_scores, params={"run": run_id})
    given = await use(call, labels.run_labels, params={"run": run_id})
    brief = await use(
        call,
        run_list.experiment_brief,
        params={"experiment": run.experiment_id},
        query={"scores": "0"},
    )
    offset_text = call.request.query_params.get("steps", "0")
    offset = whole_number(offset_text) or 0
    view = trajectory_view(
        run.trajectory,
        started=run.started_at,
        ended=run.harness_done_at or run.finished_at,
        offset=offset,
    )
    rounds: dict[int, list[Any]] = {}
    for s in found:
        rounds.setdefault(s.round, []).append(s)
    current = rounds.pop(brief.scoring_round, [])
    steps_pager = None
    if view is not None and view.total_steps > STEP_PAGE:
        steps_pager = pager(view.total_steps, offset, STEP_PAGE, {}, "#trajectory", "steps")
    return call.render(
        "run.html",
        fmt=FMT,
        run=run,
        e=brief,
        current=current,
        older=sorted(rounds.items(), reverse=True),
        view=view,
        steps_pager=steps_pager,
        output=None if run.output is None else _json(run.output),
        timings=_timings(run),
        over=run.state in TERMINAL,
        no_spans=await _no_spans(call, run, brief.agent),
        not_collected=[e.message for e in run.trajectory_errors if e.rule == NOT_COLLECTED],
        labels=given,
        label_names=sorted(
            {s.name for s in current if s.kind == "evaluator" and s.value is not None}
        ),
    )


async def run_label(call: WebCall) -> Response:
    """The run page's Pass/Fail buttons: a label through the API's own handler."""
    run_id = call.param("run")
    await label_from_form(call, run_id, await call.form())
    return RedirectResponse(f"/runs/{run_id}?done=label#labels", 303)


async def label_from_form(call: WebCall, run_id: str, form: dict[str, Any]) -> None:
    """A Pass/Fail form's label, posted through the API's own handler (and its rule)."""
    comment = str(form.get("comment", "")).strip() or None
    body = form_struct(
        LabelRequest,
        {"name": str(form.get("name", "")), "value": form.get("value", ""), "comment": comment},
    )
    await use(call, labels.label_run, params={"run": run_id}, body=body)


async def _no_spans(call: WebCall, run: Run, agent: str) -> NoSpans | None:
    """Why a traced run got no trajectory, when no span of its session reached its agent."""
    if not awaited_spans(run):
        return None
    assert run.session_id is not None
    try:
        found = await use(call, otel.traces_find, params={"session": run.session_id})
    except NotFound:
        found = []
    return no_spans(run, agent, found)


def _timings(run: Any) -> list[tuple[str, datetime | None, str]]:
    """The run's moments, each with the time since the one before."""
    moments = [
        ("queued", run.created_at),
        ("started", run.started_at),
        ("harness done", run.harness_done_at),
        ("stop requested", run.stop_requested_at),
        ("deadline", run.deadline_at),
        ("finished", run.finished_at),
    ]
    shown = []
    previous = None
    for name, moment in moments:
        if moment is None:
            continue
        gap = ""
        if previous is not None and name != "deadline":
            gap = f"+{FMT.secs((moment - previous).total_seconds())}"
        if name != "deadline":
            previous = moment
        shown.append((name, moment, gap))
    return shown


PAGES = [Page("GET", "/runs/{run}", run_page), Page("POST", "/runs/{run}/labels", run_label)]
