"""The built-in evaluators: checks of a run's answer, output and trajectory, and gauges.

Each one is an :class:`~evalkit.scoring.model.Evaluator` (``await BUILTINS[name](ctx,
config)``) that gives one :class:`ScoreItem` named after itself. Checks give 1.0 (pass) or
0.0 (fail); gauges (``latency``, ``tokens``, ``cost``, ``steps``, ``tool_call_count``) give
``value=None`` and the measurement in ``raw``, because a measurement has no pass mark of its
own. An evaluator whose input the agent does not provide gives ``value=None`` and says why in
``skipped``; a config it cannot use gives ``value=None`` and says why in ``error``. None of
them raises for a bad run or a bad config.

Gating, in this order:

- ``tool_calls`` and ``tool_call_count`` need ``provides.tool_calls``; ``tokens`` and
  ``cost`` need ``provides.token_usage`` (without them a trajectory's missing tool calls or
  token counts would read as "none", a failure the agent is not to blame for);
- every evaluator of the trajectory (those four, ``max_steps`` and ``steps``) needs a valid
  trajectory. One in hand is proof enough that the agent provides it (a traced agent's
  harness may declare ``provides.trajectory: false`` while its spans make one).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import jsonschema
import msgspec
import regex
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

from evalkit.atif import summarize
from evalkit.atif.model import Trajectory
from evalkit.cases.model import (
    BUILTIN_EVALUATORS,
    ExactMatchConfig,
    NumericConfig,
    RegexConfig,
    TextMatchConfig,
    ToolCallsConfig,
    canonical_json,
)
from evalkit.scoring.model import Evaluator, RunContext, ScoreItem, ScoreKind

__all__ = ["BUILTINS", "EVALUATOR_VERSION", "EvaluatorError", "read_number", "tool_call_names"]

EVALUATOR_VERSION = "1"
"""Bumped when a built-in's verdict on the same run could change."""

SHOWN = 120
"""Characters of an answer or a value quoted in an explanation."""


class EvaluatorError(Exception):
    """The evaluator cannot give a reading: its config, or the case, is unusable."""


Check = Callable[[RunContext, Any], ScoreItem]


def _identity(name: str) -> str:
    return f"builtin:{name}"


def _item(name: str, kind: ScoreKind = "evaluator", **fields: Any) -> ScoreItem:
    return ScoreItem(
        name=name,
        kind=kind,
        evaluator=_identity(name),
        evaluator_version=EVALUATOR_VERSION,
        **{"value": None, **fields},
    )


def _verdict(name: str, ok: bool, explanation: str) -> ScoreItem:
    return _item(name, value=1.0 if ok else 0.0, explanation=explanation)


def _gauge(name: str, raw: float | int, explanation: str) -> ScoreItem:
    return _item(name, "gauge", raw=raw, explanation=explanation)


def _builtin(
    name: str, *, kind: ScoreKind = "evaluator", needs: str | None = None, trajectory: bool = False
) -> Callable[[Check], Evaluator]:
    """Wrap a check: gate it on the agent's capabilities and the trajectory, and turn an
    :class:`EvaluatorError` into an error reading."""

    def wrap(check: Check) -> Evaluator:
        async def evaluator(ctx: RunContext, config: Any) -> list[ScoreItem]:
            reason = _gate(ctx, needs, trajectory)
            if reason is not None:
                return [_item(name, kind, skipped=reason)]
            try:
                return [check(ctx, config)]
            except EvaluatorError as exc:
                return [_item(name, kind, error=f"{name}: {exc}")]

        evaluator.__name__ = evaluator.__qualname__ = name
        evaluator.__doc__ = check.__doc__
        return evaluator

    return wrap


_CAPABILITY_TEXT = {
    "tool_calls": "the agent does not provide its tool calls (provides.tool_calls is false)",
    "token_usage": "the agent does not report token usage (provides.token_usage is false)",
}


def _gate(ctx: RunContext, needs: str | None, trajectory: bool) -> str | None:
    if needs is not None and not getattr(ctx.provides, needs):
        return _CAPABILITY_TEXT[needs]
    if trajectory and _trajectory(ctx) is None:
        return _no_trajectory(ctx)
    return None


def _no_trajectory(ctx: RunContext) -> str:
    if ctx.trajectory_valid is False:
        return (
            f"the run's trajectory is not valid ATIF, so it was not read "
            f"(see `evalkit runs show {ctx.run_id}`)"
        )
    if ctx.trajectory_unreadable:
        return "the run's trajectory could not be read as ATIF"
    if not ctx.provides.trajectory:
        return "the agent provides no trajectory (provides.trajectory is false)"
    return "no trajectory was collected for this run"


def _trajectory(ctx: RunContext) -> Trajectory | None:
    return None if ctx.trajectory_valid is False else ctx.trajectory


def _must_trajectory(ctx: RunContext) -> Trajectory:
    traj = _trajectory(ctx)
    assert traj is not None  # gated
    return traj


# --------------------------------------------------------------------------- text helpers


def _quote(text: str) -> str:
    """``'text'`` on one line, cut at ``SHOWN`` characters (backslashes kept as written, so
    a pattern reads as in the case file)."""
    shown = text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
    return "'" + shown.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t") + "'"


def _text(value: Any) -> str:
    """A reference value as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return canonical_json(value).decode()


def _expected_answer(ctx: RunContext, name: str) -> Any:
    expected = ctx.case.get("expected")
    if not isinstance(expected, dict) or expected.get("answer") is None:
        raise EvaluatorError(
            "the case has no `expected.answer` to compare with; add one to the case, "
            f"or give `{name}` its own value"
        )
    return expected["answer"]


def _convert(config: Any, struct: type) -> Any:
    try:
        return msgspec.convert(config, struct)
    except msgspec.ValidationError as exc:
        raise EvaluatorError(f"the config {_quote(_text(config))} is not usable: {exc}") from None


def _strings(value: Any) -> list[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise EvaluatorError(f"takes a string or a list of strings, got {_quote(_text(value))}")
    return list(values)


NO_ANSWER = "the run has no answer to check"


# --------------------------------------------------------------------------- answer checks


@_builtin("exact_match")
def _exact_match(ctx: RunContext, config: Any) -> ScoreItem:
    """The answer equals the reference (``expected.answer`` unless a value is given)."""
    if config is True:
        cfg = ExactMatchConfig()
    elif isinstance(config, str):
        cfg = ExactMatchConfig(value=config)
    else:
        cfg = _convert(config, ExactMatchConfig)
    reference = _text(cfg.value if cfg.value is not None else _expected_answer(ctx, "exact_match"))
    if ctx.answer is None:
        return _verdict("exact_match", False, NO_ANSWER)
    answer, wanted = ctx.answer, reference
    if cfg.strip:
        answer, wanted = answer.strip(), wanted.strip()
    if cfg.ignore_case:
        answer, wanted = answer.casefold(), wanted.casefold()
    if answer == wanted:
        return _verdict("exact_match", True, f"the answer equals {_quote(reference)}")
    return _verdict(
        "exact_match", False, f"the answer {_quote(ctx.answer)} is not {_quote(reference)}"
    )


def _text_config(config: Any) -> TextMatchConfig:
    if isinstance(config, dict):
        cfg = _convert(config, TextMatchConfig)
        return TextMatchConfig(values=_strings(cfg.values), ignore_case=cfg.ignore_case)
    return TextMatchConfig(values=_strings(config))


def _found(answer: str, values: list[str], ignore_case: bool) -> list[str]:
    """The values that occur in the answer."""
    if ignore_case:
        folded = answer.casefold()
        return [v for v in values if v.casefold() in folded]
    return [v for v in values if v in answer]


@_builtin("contains")
def _contains(ctx: RunContext, config: Any) -> ScoreItem:
    """The answer contains every one of the strings."""
    cfg = _text_config(config)
    values = list(cfg.values)
    if ctx.answer is None:
        return _verdict("contains", False, NO_ANSWER)
    found = _found(ctx.answer, values, cfg.ignore_case)
    missing = [v for v in values if v not in found]
    if not missing:
        return _verdict("contains", True, f"the answer contains {_list(values)}")
    return _verdict("contains", False, f"the answer lacks {_list(missing)}")


@_builtin("not_contains")
def _not_contains(ctx: RunContext, config: Any) -> ScoreItem:
    """The answer contains none of the strings."""
    cfg = _text_config(config)
    values = list(cfg.values)
    if ctx.answer is None:
        return _verdict("not_contains", False, NO_ANSWER)
    present = _found(ctx.answer, values, cfg.ignore_case)
    if not present:
        return _verdict("not_contains", True, f"the answer contains none of {_list(values)}")
    return _verdict("not_contains", False, f"the answer contains {_list(present)}")


def _list(values: list[str]) -> str:
    return ", ".join(_quote(v) for v in values)


REGEX_TIMEOUT_SECONDS = 2.0
"""The longest one pattern may search one answer. Python's ``re`` cannot be stopped, and a
pattern with nested repeats (``(a|aa)+$``) can backtrack for hours on a short answer,
holding the worker's event loop; the ``regex`` module (in its ``re``-compatible mode) stops
at this time."""


@_builtin("regex")
def _regex(ctx: RunContext, config: Any) -> ScoreItem:
    """Every pattern matches somewhere in the answer (``re.search`` semantics)."""
    if isinstance(config, dict):
        cfg = _convert(config, RegexConfig)
        patterns = _strings(cfg.pattern)
        flags = regex.IGNORECASE if cfg.ignore_case else 0
    else:
        patterns, flags = _strings(config), 0
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(regex.compile(pattern, flags | regex.VERSION0))
        except regex.error as exc:
            raise EvaluatorError(f"the pattern {_quote(pattern)} does not compile: {exc}") from None
    if ctx.answer is None:
        return _verdict("regex", False, NO_ANSWER)
    missing = []
    for p in compiled:
        try:
            found = p.search(ctx.answer, timeout=REGEX_TIMEOUT_SECONDS)
        except TimeoutError:
            raise EvaluatorError(
                f"the pattern {_quote(p.pattern)} was stopped after {REGEX_TIMEOUT_SECONDS:g} s "
                "on this answer; nested repeats such as (a|aa)+ backtrack without end: "
                "simplify the pattern"
            ) from None
        if found is None:
            missing.append(p.pattern)
    if not missing:
        return _verdict("regex", True, f"the answer matches {_list(patterns)}")
    return _verdict("regex", False, f"the answer does not match {_list(missing)}")


# A number as people write it: optional sign, digits with optional thousands commas, an
# optional fraction and exponent. Not part of a word ("Q3", "v2") or of a longer number.
_NUMBER = re.compile(
    r"(?<![\w.])[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
)
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})


def read_number(text: str) -> float | None:
    """The number a text states: the whole text when it is one number, else the last number
    in it (``"The total is $4,200.50."`` -> 4200.5); None when it has none."""
    text = text.translate(_MINUS)
    found = None
    for match in _NUMBER.finditer(text):
        found = float(match.group().replace(",", ""))
    if found is not None and math.isfinite(found):
        return found
    return None


def _reference_number(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        number = read_number(value)
        if number is not None:
            return number
    raise EvaluatorError(
        f"`expected.answer` {_quote(_text(value))} states no number to compare with"
    )


def _number_text(value: float) -> str:
    return f"{value:.12g}"


@_builtin("numeric")
def _numeric(ctx: RunContext, config: Any) -> ScoreItem:
    """The answer's number is within the tolerance of the reference."""
    if config is True:
        cfg = NumericConfig()
    elif isinstance(config, int | float) and not isinstance(config, bool):
        cfg = NumericConfig(value=float(config))
    else:
        cfg = _convert(config, NumericConfig)
    if cfg.value is not None:
        wanted = float(cfg.value)
    else:
        wanted = _reference_number(_expected_answer(ctx, "numeric"))
    if ctx.answer is None:
        return _verdict("numeric", False, NO_ANSWER)
    got = read_number(ctx.answer)
    if got is None:
        return _verdict("numeric", False, f"the answer {_quote(ctx.answer)} states no number")
    bound = cfg.tolerance * abs(wanted) if cfg.relative else cfg.tolerance
    diff = abs(got - wanted)
    # Floating-point slack: 0.1 + 0.2 read back as 0.30000000000000004 still equals 0.3.
    ok = diff <= bound + 1e-9 * max(1.0, abs(wanted))
    tolerance = (
        f"{_number_text(cfg.tolerance * 100)}% of it" if cfg.relative else _number_text(bound)
    )
    explanation = (
        f"read {_number_text(got)} from the answer; expected {_number_text(wanted)} "
        f"within {tolerance}, off by {_number_text(diff)}"
    )
    return _verdict("numeric", ok, explanation)


# --------------------------------------------------------------------------- output checks


MAX_SCHEMA_ERRORS = 5


@_builtin("json_schema")
def _json_schema(ctx: RunContext, config: Any) -> ScoreItem:
    """The structured output (or, without one, the answer read as JSON) validates."""
    if not isinstance(config, dict):
        raise EvaluatorError(f"takes a JSON Schema mapping, got {_quote(_text(config))}")
    validator_class = jsonschema.validators.validator_for(
        config, default=jsonschema.Draft202012Validator
    )
    try:
        validator_class.check_schema(config)
    except SchemaError as exc:
        raise EvaluatorError(
            f"the case's schema is not a valid JSON Schema: {exc.message}"
        ) from None
    instance, source = _structured(ctx)
    if source is None:
        return _verdict(
            "json_schema",
            False,
            "the run has no structured output (no output, and the answer is not JSON)",
        )
    # Only the schema itself and the JSON Schema metaschemas resolve: a remote $ref is
    # never fetched (jsonschema would, from the worker, past the egress policy).
    validator = validator_class(config, registry=SPECIFICATIONS)
    try:
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    except Exception as exc:  # an unresolvable $ref, a bad pattern inside the schema
        raise EvaluatorError(f"the case's schema cannot be applied: {exc}") from None
    if not errors:
        return _verdict("json_schema", True, f"the {source} validates against the schema")
    shown = "; ".join(
        f"{_json_path(e.absolute_path)}: {e.message}" for e in errors[:MAX_SCHEMA_ERRORS]
    )
    more = (
        f" (and {len(errors) - MAX_SCHEMA_ERRORS} more)" if len(errors) > MAX_SCHEMA_ERRORS else ""
    )
    return _verdict("json_schema", False, f"the {source} breaks the schema: {shown}{more}")


def _structured(ctx: RunContext) -> tuple[Any, str | None]:
    if ctx.output is not None:
        return ctx.output, "output"
    if ctx.answer is not None:
        try:
            return msgspec.json.decode(ctx.answer), "answer (read as JSON)"
        except msgspec.DecodeError:
            pass
    return None, None


def _json_path(path: Any) -> str:
    text = "$"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


# --------------------------------------------------------------------------- trajectory checks


def tool_call_names(traj: Trajectory) -> list[str]:
    """Every tool call's function name in the order the calls were made: a subagent's calls
    (an embedded trajectory a step's observation refers to) come where that step is;
    embedded subagents nothing refers to come last."""
    embedded = {t.trajectory_id: t for t in traj.subagent_trajectories or () if t.trajectory_id}
    names: list[str] = []
    seen: set[int] = set()

    def walk(t: Trajectory, depth: int) -> None:
        if id(t) in seen or depth > 16:
            return
        seen.add(id(t))
        local = {s.trajectory_id: s for s in t.subagent_trajectories or () if s.trajectory_id}
        for step in t.steps:
            names.extend(call.function_name for call in step.tool_calls or ())
            for result in step.observation.results if step.observation else ():
                for ref in result.subagent_trajectory_ref or ():
                    sub = local.get(ref.trajectory_id or "") or embedded.get(
                        ref.trajectory_id or ""
                    )
                    if sub is not None:
                        walk(sub, depth + 1)
        for sub in t.subagent_trajectories or ():
            walk(sub, depth + 1)

    walk(traj, 0)
    return names


@_builtin("tool_calls", needs="tool_calls", trajectory=True)
def _tool_calls(ctx: RunContext, config: Any) -> ScoreItem:
    """Required tools were called, forbidden ones were not, ordered ones first came in order."""
    cfg = _convert(config, ToolCallsConfig)
    if not (cfg.required or cfg.forbidden or cfg.order):
        raise EvaluatorError("give at least one of `required`, `forbidden` and `order`")
    names = tool_call_names(_must_trajectory(ctx))
    first: dict[str, int] = {}
    for index, name in enumerate(names):
        first.setdefault(name, index)
    counts = Counter(names)
    problems: list[str] = []
    missing = [n for n in cfg.required or () if n not in first]
    if missing:
        problems.append(f"never called {', '.join(missing)}")
    called = [f"{n} ({counts[n]}x)" for n in cfg.forbidden or () if n in first]
    if called:
        problems.append(f"called forbidden {', '.join(called)}")
    if cfg.order:
        absent = [n for n in cfg.order if n not in first]
        positions = [first[n] for n in cfg.order if n in first]
        if absent:
            problems.append(f"the ordered tools {', '.join(absent)} were never called")
        elif positions != sorted(positions) or len(set(positions)) != len(positions):
            actual = sorted(cfg.order, key=lambda n: first[n])
            problems.append(
                f"first calls came in the order {' -> '.join(actual)}, not {' -> '.join(cfg.order)}"
            )
    if problems:
        return _verdict("tool_calls", False, "; ".join(problems))
    return _verdict("tool_calls", True, f"tool calls as required ({_call_counts(counts)})")


def _call_counts(counts: Counter[str]) -> str:
    if not counts:
        return "no tool calls"
    return ", ".join(f"{name} {n}x" for name, n in sorted(counts.items()))


@_builtin("max_steps", trajectory=True)
def _max_steps(ctx: RunContext, config: Any) -> ScoreItem:
    """The trajectory has at most this many agent steps."""
    if isinstance(config, bool) or not isinstance(config, int) or config < 1:
        raise EvaluatorError(f"takes a whole number of at least 1, got {_quote(_text(config))}")
    steps = sum(1 for s in _must_trajectory(ctx).steps if s.source == "agent")
    ok = steps <= config
    return _verdict(
        "max_steps", ok, f"{steps} agent step{'s' if steps != 1 else ''}, at most {config} allowed"
    )


# --------------------------------------------------------------------------- gauges


@_builtin("latency", kind="gauge")
def _latency(ctx: RunContext, config: Any) -> ScoreItem:
    """Seconds the run took: from the trajectory's first to last timestamp when it has them,
    else from evalkit's start of the run to the harness's final status."""
    traj = _trajectory(ctx)
    if traj is not None:
        seconds = summarize(traj).duration_seconds
        if seconds is not None:
            return _gauge("latency", seconds, f"{seconds:.3f} s by the trajectory's timestamps")
    if ctx.started_at is not None and ctx.finished_at is not None:
        seconds = max((ctx.finished_at - ctx.started_at).total_seconds(), 0.0)
        return _gauge(
            "latency", seconds, f"{seconds:.3f} s from the run's start to its final status"
        )
    return _item(
        "latency",
        "gauge",
        skipped="the run has no timing: no trajectory timestamps and no start and end",
    )


@_builtin("tokens", kind="gauge", needs="token_usage", trajectory=True)
def _tokens(ctx: RunContext, config: Any) -> ScoreItem:
    """Prompt plus completion tokens, as the trajectory reports them."""
    summary = summarize(_must_trajectory(ctx))
    if summary.prompt_tokens is None and summary.completion_tokens is None:
        return _item("tokens", "gauge", skipped="the trajectory reports no token counts")
    prompt, completion = summary.prompt_tokens or 0, summary.completion_tokens or 0
    cached = "" if summary.cached_tokens is None else f", {summary.cached_tokens} cached"
    return _gauge(
        "tokens",
        prompt + completion,
        f"{prompt + completion} tokens: {prompt} prompt, {completion} completion{cached}",
    )


@_builtin("cost", kind="gauge", needs="token_usage", trajectory=True)
def _cost(ctx: RunContext, config: Any) -> ScoreItem:
    """The run's cost in USD, as the trajectory reports it."""
    cost = summarize(_must_trajectory(ctx)).cost_usd
    if cost is None:
        return _item("cost", "gauge", skipped="the trajectory reports no cost")
    return _gauge("cost", cost, f"${cost:.6f}")


@_builtin("steps", kind="gauge", trajectory=True)
def _steps(ctx: RunContext, config: Any) -> ScoreItem:
    """The number of agent steps in the trajectory."""
    traj = _must_trajectory(ctx)
    agent = sum(1 for s in traj.steps if s.source == "agent")
    return _gauge("steps", agent, f"{agent} agent steps of {len(traj.steps)} in all")


@_builtin("tool_call_count", kind="gauge", needs="tool_calls", trajectory=True)
def _tool_call_count(ctx: RunContext, config: Any) -> ScoreItem:
    """The number of tool calls, an embedded subagent's included."""
    counts = Counter(tool_call_names(_must_trajectory(ctx)))
    total = sum(counts.values())
    return _gauge("tool_call_count", total, _call_counts(counts))


BUILTINS: dict[str, Evaluator] = {
    "exact_match": _exact_match,
    "contains": _contains,
    "not_contains": _not_contains,
    "regex": _regex,
    "numeric": _numeric,
    "json_schema": _json_schema,
    "tool_calls": _tool_calls,
    "max_steps": _max_steps,
    "latency": _latency,
    "tokens": _tokens,
    "cost": _cost,
    "steps": _steps,
    "tool_call_count": _tool_call_count,
}
assert tuple(BUILTINS) == BUILTIN_EVALUATORS
