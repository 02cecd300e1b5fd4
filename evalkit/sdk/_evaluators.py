"""Python evaluators: functions that score a run in the SDK's process, selected by a case's
``evaluators.custom.<name>`` exactly like a remote (HTTP) evaluator."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.model.sdk import PythonScore
from evalkit.scoring.model import not_judged_reason
from evalkit.sdk._model import EvalCase, EvalRun, ScoreItem, ScoreKind, SdkError

log = logging.getLogger("evalkit.sdk")

MAX_TEXT = 4000


@dataclass(frozen=True)
class PythonEvaluator:
    """A function turned into an evaluator by :func:`evaluator`. Calling it calls the
    function."""

    fn: Callable[..., Any]
    name: str
    kind: ScoreKind = "evaluator"
    requires_trajectory: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def evaluator(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    kind: ScoreKind = "evaluator",
    requires_trajectory: bool = False,
) -> Any:
    """Turn ``fn(case, run)`` into a Python evaluator named ``name`` (default: the
    function's name). It scores the runs whose case lists it under ``evaluators.custom``
    and returns a float in [0, 1], a :class:`ScoreItem`, or a list of them. A ``gauge``
    is measured and shown, never passed or failed. With ``requires_trajectory``, a run
    without a valid trajectory is skipped (no reading) instead of scored."""
    if kind not in ("evaluator", "gauge"):
        raise SdkError(f"kind must be 'evaluator' or 'gauge', got {kind!r}")

    def wrap(function: Callable[..., Any]) -> PythonEvaluator:
        if isinstance(function, PythonEvaluator):
            function = function.fn
        chosen = name or getattr(function, "__name__", None)
        if not chosen or chosen == "<lambda>":
            raise SdkError("a Python evaluator needs a name: @evaluator(name='...')")
        return PythonEvaluator(function, chosen, kind, requires_trajectory)

    return wrap(fn) if fn is not None else wrap


def check_evaluators(evaluators: Iterable[Any] | None) -> list[PythonEvaluator]:
    found: list[PythonEvaluator] = []
    for item in evaluators or ():
        if not isinstance(item, PythonEvaluator):
            raise SdkError(
                f"evaluators takes functions decorated with @evaluator(name=...), got "
                f"{getattr(item, '__name__', type(item).__name__)}"
            )
        if any(e.name == item.name for e in found):
            raise SdkError(f"two Python evaluators are named {item.name!r}; names must differ")
        found.append(item)
    return found


def selected(evaluators: Sequence[PythonEvaluator], content: dict[str, Any]) -> list[Any]:
    """(evaluator, config) for each evaluator the case lists under ``evaluators.custom``."""
    block = content.get("evaluators")
    custom = block.get("custom") if isinstance(block, dict) else None
    if not isinstance(custom, dict):
        return []
    return [(e, custom[e.name]) for e in evaluators if e.name in custom]


def eval_case(case_id: str, content: dict[str, Any], config: Any) -> EvalCase:
    metadata = content.get("metadata")
    return EvalCase(
        id=case_id,
        input=dict(content.get("input") or {}),
        expected=content.get("expected"),
        tags=list(content.get("tags") or []),
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
        config=config,
    )


async def score_run(
    evaluators: Sequence[PythonEvaluator],
    case_id: str,
    content: dict[str, Any],
    run: EvalRun,
) -> list[PythonScore]:
    """Run every evaluator the case selects on ``run``; whatever happens, each gives scores
    (an error score at worst). Names already given by an earlier evaluator are dropped."""
    scores: list[PythonScore] = []
    for chosen, config in selected(evaluators, content):
        scores.extend(await _one(chosen, eval_case(case_id, content, config), run))
    seen: set[str] = set()
    unique = []
    for score in scores:
        if score.name in seen:
            log.warning(
                "evaluator %s gave score %r twice; kept the first", score.evaluator, score.name
            )
            continue
        seen.add(score.name)
        unique.append(score)
    return unique


def not_judged(
    evaluators: Sequence[PythonEvaluator],
    content: dict[str, Any],
    run_id: int,
    *,
    judge: bool = False,
) -> list[PythonScore]:
    """The scores of a run the agent failed (its task raised): every Python evaluator the
    case selects, and the judge when this process grades its rubric (``judge``), skipped
    with that reason, uncalled; the statistics count the run as failed (docs/scoring.md)."""
    reason = not_judged_reason(run_id)
    scores = [_score(e, e.name, None, skipped=reason) for e, _ in selected(evaluators, content)]
    if judge:
        from evalkit.scoring import judge as server_judge

        scores.append(
            PythonScore(
                evaluator="judge",
                identity="judge",
                name=server_judge.SCORE_NAME,
                value=None,
                skipped=reason,
            )
        )
    return scores


async def _one(chosen: PythonEvaluator, case: EvalCase, run: EvalRun) -> list[PythonScore]:
    if chosen.requires_trajectory and run.trajectory is None:
        return [
            _score(
                chosen,
                chosen.name,
                None,
                skipped="the run has no valid trajectory, and this evaluator requires one",
            )
        ]
    try:
        if chosen.is_async:
            value = await chosen.fn(case, run)
        else:
            value = await asyncio.to_thread(chosen.fn, case, run)
            if inspect.isawaitable(value):
                value = await value
    except Exception as exc:
        log.debug("evaluator %s raised", chosen.name, exc_info=True)
        return [_score(chosen, chosen.name, None, error=f"{type(exc).__name__}: {exc}")]
    return _scores_of(chosen, value)


def _scores_of(chosen: PythonEvaluator, value: Any) -> list[PythonScore]:
    items = value if isinstance(value, list | tuple) else [value]
    if not items:
        return [_score(chosen, chosen.name, None, error=f"{chosen.name} gave no scores")]
    out = []
    for item in items:
        if isinstance(item, ScoreItem):
            out.append(
                _checked(chosen, item.name, item.score, item.explanation, item.kind, item.raw)
            )
        elif item is None or isinstance(item, bool | int | float):
            score = None if item is None else float(item)
            out.append(_checked(chosen, chosen.name, score, None, None, None))
        else:
            out.append(
                _score(
                    chosen,
                    chosen.name,
                    None,
                    error=f"{chosen.name} returned {type(item).__name__}; return a float in "
                    "[0, 1], a ScoreItem, or a list of them",
                )
            )
    return out


def _checked(
    chosen: PythonEvaluator,
    name: str,
    score: Any,
    explanation: str | None,
    kind: str | None,
    raw: Any,
) -> PythonScore:
    if not name:
        return _score(chosen, chosen.name, None, error=f"{chosen.name} gave a score with no name")
    if kind is not None and kind not in ("evaluator", "gauge"):
        return _score(chosen, name, None, error=f"score {name!r} has kind {kind!r}")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float):
            return _score(chosen, name, None, error=f"score {name!r} is {score!r}, not a number")
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            return _score(chosen, name, None, error=f"score {name!r} is {score!r}, outside [0, 1]")
    try:
        import msgspec

        msgspec.json.encode(raw)
    except (TypeError, ValueError):
        return _score(chosen, name, None, error=f"score {name!r} has a raw value that is not JSON")
    return _score(
        chosen,
        name,
        None if score is None else float(score),
        explanation=explanation,
        kind=kind,
        raw=raw,
    )


def _score(
    chosen: PythonEvaluator,
    name: str,
    value: float | None,
    *,
    explanation: str | None = None,
    error: str | None = None,
    skipped: str | None = None,
    kind: str | None = None,
    raw: Any = None,
) -> PythonScore:
    return PythonScore(
        evaluator=chosen.name,
        name=name,
        value=value,
        kind=(kind or chosen.kind),  # type: ignore[arg-type]
        explanation=_clip(explanation),
        error=_clip(error),
        skipped=skipped,
        raw=raw,
    )


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[: MAX_TEXT - 3] + "..."
