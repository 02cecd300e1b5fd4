"""``evalkit evaluate`` (re-score an experiment in a new round), ``evalkit experiments
rounds`` and ``evalkit runs scores``; the scores block of ``evalkit runs show``."""

from __future__ import annotations

import time
from typing import Annotated, Any

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import scores as wire

STALL_HINT_SECONDS = 30.0
UNITS = {"latency": " s", "cost": " USD", "tokens": " tokens"}


def evaluate(
    experiment_id: Annotated[int, Parameter(help="The experiment to re-score.")],
    /,
    *,
    evaluator: Annotated[
        list[str] | None,
        Parameter(
            name="--evaluator",
            help="Re-run only this evaluator (repeatable): a built-in name such as "
            "exact_match or latency, judge, judges.NAME (a library judge) or judges for all of "
            "them, custom.NAME, or custom for every custom one. "
            "The other scores are carried over from the previous round unchanged.",
        ),
    ] = None,
    wait: Annotated[
        bool,
        Parameter(
            negative="--no-wait",
            help="Wait until every run of the round is scored (--no-wait: print the round "
            "and return; follow it with `evalkit experiments rounds ID`).",
        ),
    ] = True,
    json: JsonFlag = False,
) -> int:
    """Score an experiment's stored runs again, in a new scoring round, without running
    the agent: after a judge or rubric fix, a new remote evaluator, or a flaky one.

    Each case's evaluators run as its pinned version selects them; earlier rounds are
    kept (`evalkit runs show` lists them all). Runs that errored before the agent answered
    are not scored. Needs write access to the experiment's workspace. Experiments scored
    by Python evaluators, or by the judge given to run_experiment, are refused: those live
    in your script, so re-score them there with evalkit.sdk.evaluate_experiment. Exits 1
    if a scoring job failed for good.
    """
    body = wire.EvaluateRequest(evaluators=evaluator or None)
    with Client() as client:
        opened: wire.ScoringRound = client.post(
            f"/api/experiments/{experiment_id}/evaluate", body, type=wire.ScoringRound
        )
        which = ", ".join(opened.evaluators) if opened.evaluators else "every evaluator"
        note(
            f"experiment {experiment_id}: round {opened.round} queued for {opened.runs} runs "
            f"({which})"
        )
        if not wait:
            if json:
                emit_json(opened)
            else:
                say(
                    f"round {opened.round} of experiment {experiment_id} queued; follow it with "
                    f"`evalkit experiments rounds {experiment_id}`"
                )
            return 0
        final = _wait(client, experiment_id, opened.round, opened.runs or 0)
    final.runs = opened.runs
    if json:
        emit_json(final)
    else:
        _print_round(final)
        say(f"summaries with confidence intervals: `evalkit experiments scores {experiment_id}`")
    return 1 if final.failed_jobs else 0


def _wait(client: Client, experiment_id: int, round_: int, total: int) -> wire.ScoringRound:
    shown, last_change = "", time.monotonic()
    hinted = False
    while True:
        found = [r for r in _rounds(client, experiment_id) if r.round == round_]
        if not found:
            raise CliError(f"experiment {experiment_id} has no round {round_} any more")
        current = found[0]
        line = f"  {total - current.pending_jobs}/{total} runs scored"
        if line != shown:
            note(line)
            shown, last_change = line, time.monotonic()
        if current.pending_jobs == 0:
            return current
        if not hinted and time.monotonic() - last_change > STALL_HINT_SECONDS:
            note(
                "  no progress for 30 s: is a worker running (`evalkit worker`, or "
                "`evalkit server --with-worker`)? Ctrl-C stops waiting; the round goes on"
            )
            hinted = True
        time.sleep(0.3)


def _rounds(client: Client, experiment_id: int) -> list[wire.ScoringRound]:
    rounds: list[wire.ScoringRound] = client.get(
        f"/api/experiments/{experiment_id}/rounds", type=list[wire.ScoringRound]
    )
    return rounds


def _print_round(r: wire.ScoringRound) -> None:
    who = f" by {r.created_by}" if r.created_by else ""
    when = f" {r.created_at:%Y-%m-%d %H:%M:%S}" if r.created_at else ""
    which = f", only {', '.join(r.evaluators)}" if r.evaluators else ""
    say(
        f"round {r.round}{when}{who}{which}: {r.runs_scored} runs scored, {r.scores} scores "
        f"({r.errors} errors, {r.skipped} skipped)"
        + (f", {r.pending_jobs} runs still to score" if r.pending_jobs else "")
        + (f", {r.failed_jobs} scoring jobs FAILED" if r.failed_jobs else "")
    )
    if r.totals:
        table(
            [
                (
                    t.name,
                    t.kind,
                    t.runs,
                    _mean(t),
                    t.skipped or None,
                    t.errors or None,
                )
                for t in r.totals
            ],
            ["score", "kind", "runs", "mean", "skipped", "errors"],
        )


def _mean(t: wire.ScoreTotals) -> str | None:
    if t.kind == "gauge":
        if t.raw_mean is None:
            return None
        return f"{t.raw_mean:.4g}{UNITS.get(t.name, '')}"
    return None if t.mean is None else f"{t.mean:.3f}"


def experiments_rounds(
    experiment_id: Annotated[int, Parameter(help="The experiment's id.")],
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """An experiment's scoring rounds, newest first: round 1 when its runs finished, one
    more per `evalkit evaluate`, each with its scores counted per name."""
    with Client() as client:
        rounds = _rounds(client, experiment_id)
    if json:
        emit_json(rounds)
        return 0
    for index, r in enumerate(rounds):
        if index:
            say()
        _print_round(r)
    return 0


def runs_scores(
    run_id: Annotated[int, Parameter(help="The run's id (see `evalkit experiments show`).")],
    /,
    *,
    round: Annotated[int | None, Parameter(help="Only this scoring round.")] = None,
    json: JsonFlag = False,
) -> int:
    """A run's scores with their explanations, every scoring round, newest first."""
    with Client() as client:
        scores = _run_scores(client, run_id, round)
    if json:
        emit_json(scores)
        return 0
    _print_scores(scores)
    return 0


def _run_scores(client: Client, run_id: int, round: int | None = None) -> list[wire.Score]:
    query = f"?round={round}" if round is not None else ""
    found: list[wire.Score] = client.get(f"/api/runs/{run_id}/scores{query}", type=list[wire.Score])
    return found


def print_run_scores(run_id: int) -> None:
    """The scores block of `evalkit runs show`: every round, newest first."""
    with Client() as client:
        scores = _run_scores(client, run_id)
    _print_scores(scores)


def _print_scores(scores: list[wire.Score]) -> None:
    if not scores:
        say("  scores: none (not scored yet, or the case selects no evaluators)")
        return
    newest = scores[0].round
    by_round: dict[int, list[wire.Score]] = {}
    for s in scores:
        by_round.setdefault(s.round, []).append(s)
    width = max(len(s.name) for s in scores)
    readings = [_reading(s) for s in scores]
    shown = max(len(reading) for reading, _ in readings)
    at = 0
    for round_, items in by_round.items():
        say(f"  scores, round {round_}{' (latest)' if round_ == newest else ''}:")
        for s in items:
            reading, detail = readings[at]
            at += 1
            say(f"    {s.name.ljust(width)}  {reading.ljust(shown)}  {detail}".rstrip())


def _reading(s: wire.Score) -> tuple[str, str]:
    if s.error is not None:
        return "ERROR", s.error
    if s.skipped is not None:
        return "skipped", s.skipped
    detail = s.explanation or ""
    if s.judge_model:
        detail = f"[{s.judge_model}] {detail}"
    if s.kind == "gauge" and s.value is None:
        return _raw(s.name, s.raw), detail
    value = "-" if s.value is None else f"{s.value:.2f}"
    return value, detail


def _raw(name: str, raw: Any) -> str:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return f"{raw:.4g}{UNITS.get(name, '')}"
    return "-" if raw is None else str(raw)
