"""``evalkit experiments scores`` and ``evalkit experiments compare``: summaries and CI gates."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlencode

from cyclopts import Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say, table
from evalkit.model import stats as wire
from evalkit.scoring import stats

# --------------------------------------------------------------------------- scores


def experiments_scores(
    experiment_id: Annotated[int, Parameter(help="The experiment's id.")],
    /,
    *,
    k: Annotated[
        list[int] | None,
        Parameter(
            name="--k",
            help="Report pass@k and pass^k for this k (repeatable; default 1, 2, 3, 5, 10, "
            "... up to the repetitions, and the repetitions).",
        ),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Scores of an experiment's current scoring round, per score name.

    For each name: readings, the mean with a 95% Student t interval, and for evaluators the
    pass rate (a reading of at least 0.5 passes) with a 95% Wilson interval. Skipped and
    errored scores are counted, never averaged. Runs that failed (the agent's task raised)
    are not judged: they are counted and listed apart, means and pass rates are over the
    runs that answered, and "of all runs" counts the failed ones as not passing. With
    repetitions, pass@k and pass^k (the chance that at least one, or all, of k runs pass)
    per score and for flaky cases. See docs/compare.md.
    """
    query = urlencode([("k", n) for n in k or []])
    with Client() as client:
        result = client.get(
            f"/api/experiments/{experiment_id}/scores" + (f"?{query}" if query else ""),
            type=wire.ExperimentScores,
        )
    if json:
        emit_json(result)
        return 0
    print_scores(result)
    return 0


def print_scores(result: wire.ExperimentScores) -> None:
    reps = f", {result.repetitions} repetitions" if result.repetitions > 1 else ""
    say(
        f"experiment {result.experiment_id}, scoring round {result.round}: {result.runs} runs{reps}"
    )
    print_failures(result)
    if not result.scores:
        say(
            "no scores yet (scoring has not run, or the cases select no evaluators); "
            f"see `evalkit experiments show {result.experiment_id}`"
        )
        return
    columns = [
        "score",
        "kind",
        "readings",
        "mean (95% CI)",
        "pass rate (95% CI)",
        "measurement (95% CI)",
        "no reading",
    ]
    if result.failed:
        columns.insert(5, "of all runs")
    table([_summary_row(s, bool(result.failed)) for s in result.scores], columns)
    if not result.ks:
        return
    say()
    say("pass@k and pass^k, mean over cases:")
    table(
        [
            (s.name, k, _num((s.pass_at_k or {}).get(k)), _num((s.pass_hat_k or {}).get(k)))
            for s in result.scores
            if s.kind == "evaluator"
            for k in result.ks
        ],
        ["score", "k", "pass@k", "pass^k"],
    )
    flaky = [c for c in result.cases if c.flaky]
    say()
    if not flaky:
        say("no flaky cases: every case passed in all its runs or in none")
        return
    say(f"flaky cases ({len(flaky)}): passed in some runs, failed in others")
    ks = result.ks
    table(
        [
            (
                c.case_id,
                c.name,
                f"{c.passes}/{c.readings}",
                *(_num(c.pass_at_k.get(k)) for k in ks),
                *(_num(c.pass_hat_k.get(k)) for k in ks),
            )
            for c in flaky
        ],
        ["case", "score", "passed", *(f"pass@{k}" for k in ks), *(f"pass^{k}" for k in ks)],
    )


def _summary_row(s: wire.ScoreSummary, failures: bool) -> tuple[object, ...]:
    evaluator = s.kind == "evaluator"
    row: list[object] = [
        s.name,
        s.kind,
        f"{s.readings}/{s.runs}",
        _value_ci(s.mean, s.mean_ci),
        _rate_ci(s.pass_rate, s.pass_rate_ci) if evaluator else None,
        _raw_ci(s.raw_mean, s.raw_mean_ci),
        _nulls(s),
    ]
    if failures:
        row.insert(5, _rate_ci(s.pass_rate_all, None) if evaluator and s.failed else None)
    return tuple(row)


def failed_line(runs: int, failed: int, errored: int) -> str | None:
    """``2 of 10 runs failed ...``; None when every run ended without failing."""
    if not failed and not errored:
        return None
    parts = []
    if failed:
        parts.append(
            f"{failed} of {runs} runs FAILED (the agent failed: not judged, so not in the "
            'means and pass rates; "of all runs" counts them as not passing)'
        )
    if errored:
        parts.append(f"{errored} of {runs} runs ERRORED (evalkit could not run them)")
    return "; ".join(parts)


def print_failures(result: wire.ExperimentScores) -> None:
    line = failed_line(result.runs, result.failed, result.errored)
    if line is None:
        return
    say(line)
    _failure_table(result.failures, result.failed + result.errored)


def _failure_table(failures: list[wire.RunFailure], total: int) -> None:
    table(
        [(f.run_id, f.case_id, f.repetition, f.state, _clip(f.error)) for f in failures],
        ["run", "case", "rep", "state", "why"],
    )
    if total > len(failures):
        say(f"  ... and {total - len(failures)} more (`evalkit experiments show` lists them)")


def _clip(text: str | None, width: int = 100) -> str:
    if not text:
        return "-"
    line = text.splitlines()[0]
    return line if len(line) <= width else line[: width - 3] + "..."


# --------------------------------------------------------------------------- compare

Format = Literal["text", "markdown", "json"]


def experiments_compare(
    baseline: Annotated[int, Parameter(help="Experiment A: the baseline.")],
    new: Annotated[int, Parameter(help="Experiment B: the new one, which gates check.")],
    /,
    *,
    gate: Annotated[
        list[str] | None,
        Parameter(
            name="--gate",
            help="Fail (exit 1) unless B meets this (repeatable): " + stats.GATE_HELP,
        ),
    ] = None,
    gate_no_regressions: Annotated[
        bool,
        Parameter(
            name="--gate-no-regressions",
            help="Fail (exit 1) when any case passing in A fails in B, for any evaluator "
            "score, or a run of B failed (the agent failed) where A's did not; a failed or "
            "failed_rate gate takes over the failed runs.",
        ),
    ] = False,
    fmt: Annotated[
        Format,
        Parameter(
            name="--format",
            help="text for a terminal, markdown for a pull-request comment, json for tools.",
        ),
    ] = "text",
    seed: Annotated[int, Parameter(help="Seed of the bootstrap (same seed, same interval).")] = (
        stats.BOOTSTRAP_SEED
    ),
    resamples: Annotated[
        int, Parameter(help=f"Bootstrap resamples (100 to {stats.MAX_RESAMPLES}).")
    ] = stats.BOOTSTRAP_RESAMPLES,
    json: JsonFlag = False,
) -> int:
    """Compare experiment B with baseline A, pairing runs by case.

    Runs are paired by case (and by repetition when both experiments have repetitions).
    Per score: the mean of each side with its 95% interval, the mean difference B - A with a
    seeded paired bootstrap interval, and for evaluators the regressions (cases passing in
    A and failing in B), improvements, and McNemar's exact test. Failed runs (the agent
    failed) are not judged: each side's are counted, and a rise is flagged. Gates check B
    and make the command exit 1 when one fails, naming it and by how much, for CI:

        evalkit experiments compare 12 15 --gate "accuracy>=0.8" --gate-no-regressions
        evalkit experiments compare 12 15 --gate "accuracy>=0.8" --gate "failed_rate<=0.05"

    See docs/compare.md.
    """
    gates = gate or []
    for text in gates:
        try:
            stats.parse_gate(text)
        except stats.StatsError as exc:
            raise CliError(str(exc), exit_code=2) from None
    params: list[tuple[str, str | int]] = [("gate", text) for text in gates]
    if gate_no_regressions:
        params.append(("no_regressions", 1))
    params += [("seed", seed), ("resamples", resamples)]
    with Client() as client:
        result: wire.Comparison = client.get(
            f"/api/experiments/{baseline}/compare/{new}?{urlencode(params)}",
            type=wire.Comparison,
        )
    if json or fmt == "json":
        emit_json(result)
    elif fmt == "markdown":
        say(markdown(result))
    else:
        print_comparison(result)
    if fmt != "text" or json:
        for failed in (g for g in result.gates if not g.passed):
            note(f"evalkit: gate failed: {failed.gate}: {failed.message}")
    return 0 if result.passed else 1


def print_comparison(result: wire.Comparison) -> None:
    say(
        f"experiment {result.b} (new) against {result.a} (baseline), paired by "
        f"{_paired_text(result.paired_by)}"
    )
    if result.gates:
        say()
        say(f"gates: {'passed' if result.passed else 'FAILED'}")
        for g in result.gates:
            say(f"  {'ok  ' if g.passed else 'FAIL'} {g.gate}: {g.message}")
    say()
    say(runs_line(result))
    if result.new_failures:
        say(f"failed in the new experiment only ({result.new_failure_count})")
        _failure_table(result.new_failures, result.new_failure_count)
    say()
    regressions = _changes(result, "regressions")
    say(f"regressions ({len(regressions)})" if regressions else "no regressions")
    if regressions:
        table(
            [(name, stats.unit_text(c), _num(c.a), _num(c.b)) for name, c in regressions],
            ["score", "case", "baseline", "new"],
        )
    say()
    if not result.scores:
        say("neither experiment has scores yet")
    else:
        table(
            [
                (
                    s.name,
                    s.kind,
                    _side(s.a),
                    _side(s.b),
                    _difference(s),
                    _rates(s),
                    f"{len(s.regressions)}/{len(s.improvements)}"
                    if s.kind == "evaluator"
                    else None,
                    _p(s.mcnemar_p),
                    _paired_count(s),
                )
                for s in result.scores
            ],
            [
                "score",
                "kind",
                "baseline (95% CI)",
                "new (95% CI)",
                "new - baseline (95% CI)",
                "pass rate",
                "reg/imp",
                "mcnemar p",
                "paired",
            ],
        )
    improvements = _changes(result, "improvements")
    if improvements:
        say()
        say(f"improvements ({len(improvements)})")
        table(
            [(name, stats.unit_text(c), _num(c.a), _num(c.b)) for name, c in improvements],
            ["score", "case", "baseline", "new"],
        )
    say()
    for line in _footnotes(result):
        say(line)


def markdown(result: wire.Comparison) -> str:
    """A summary for a pull-request comment: gate verdict, regressions, the score table."""
    out = [f"## evalkit: experiment {result.b} against baseline {result.a}", ""]
    if result.gates:
        verdict = "✅ passed" if result.passed else "❌ failed"
        out += [f"**Gates: {verdict}**", "", "| gate | result |", "|---|---|"]
        for g in result.gates:
            mark = "✅" if g.passed else "❌"
            out.append(f"| `{_md(g.gate)}` | {mark} {_md(g.message)} |")
        out.append("")
    out += [_md(runs_line(result)), ""]
    if result.new_failures:
        out += [
            f"### Failed in the new experiment only ({result.new_failure_count})",
            "",
            "| run | case | why |",
            "|---:|---|---|",
        ]
        out += [
            f"| {f.run_id} | {_md(f'{f.case_id}#{f.repetition}')} | {_md(_clip(f.error))} |"
            for f in result.new_failures
        ]
        out.append("")
    regressions = _changes(result, "regressions")
    if regressions:
        out += [
            f"### Regressions ({len(regressions)})",
            "",
            "| score | case | baseline | new |",
            "|---|---|---:|---:|",
        ]
        out += [
            f"| {_md(name)} | {_md(stats.unit_text(c))} | {_num(c.a)} | {_num(c.b)} |"
            for name, c in regressions
        ]
    else:
        out.append("**No regressions.**")
    out += ["", "### Scores", ""]
    if not result.scores:
        out.append("Neither experiment has scores yet.")
    else:
        out += [
            "| score | baseline (95% CI) | new (95% CI) | new − baseline (95% CI) "
            "| pass rate | regressions / improvements | McNemar p |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in result.scores:
            reg = f"{len(s.regressions)} / {len(s.improvements)}" if s.kind == "evaluator" else "-"
            name = _md(s.name) + (" (gauge)" if s.kind == "gauge" else "")
            out.append(
                f"| {name} "
                f"| {_side(s.a)} | {_side(s.b)} | {_difference(s)} "
                f"| {_rates(s) or '-'} | {reg} | {_p(s.mcnemar_p) or '-'} |"
            )
    improvements = _changes(result, "improvements")
    if improvements:
        out += [
            "",
            f"<details><summary>Improvements ({len(improvements)})</summary>",
            "",
            "| score | case | baseline | new |",
            "|---|---|---:|---:|",
        ]
        out += [
            f"| {_md(name)} | {_md(stats.unit_text(c))} | {_num(c.a)} | {_num(c.b)} |"
            for name, c in improvements
        ]
        out += ["", "</details>"]
    out += ["", "<sub>" + "<br>".join(_md(line) for line in _footnotes(result)) + "</sub>"]
    return "\n".join(out)


# --------------------------------------------------------------------------- formatting


def _changes(result: wire.Comparison, which: str) -> list[tuple[str, wire.UnitChange]]:
    return [(s.name, c) for s in result.scores for c in getattr(s, which)]


def runs_line(result: wire.Comparison) -> str:
    """Each side's runs and failures, flagging a rise in failed runs."""
    a = _side_runs(result.runs_a, result.failed_a, result.errored_a)
    b = _side_runs(result.runs_b, result.failed_b, result.errored_b)
    line = f"runs: baseline {a}; new {b}"
    if result.failed_rose:
        line += " (MORE RUNS FAILED: failed runs are not judged, and not in the scores below)"
    return line


def _side_runs(runs: int, failed: int, errored: int) -> str:
    text = f"{runs}, {failed} failed"
    if runs and failed:
        text += f" ({failed / runs:.0%})"
    return text + (f", {errored} errored" if errored else "")


def _paired_text(paired_by: str) -> str:
    return "case and repetition" if paired_by == "case+repetition" else "case"


def _footnotes(result: wire.Comparison) -> list[str]:
    lines = [
        f"Paired by {_paired_text(result.paired_by)}; a reading of at least 0.5 passes. "
        f"Intervals are 95%: Student t for means, a paired bootstrap for differences "
        f"({result.resamples} resamples, seed {result.seed})."
    ]
    if result.cases_only_a:
        lines.append(f"Cases only in the baseline (unpaired): {_few(result.cases_only_a)}.")
    if result.cases_only_b:
        lines.append(f"Cases only in the new experiment (unpaired): {_few(result.cases_only_b)}.")
    return lines


def _few(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _value_ci(value: float | None, ci: wire.Interval | None) -> str:
    if value is None:
        return "-"
    return _num(value) + (f" [{ci.low:.3f}, {ci.high:.3f}]" if ci else "")


def _diff_ci(value: float | None, ci: wire.Interval | None, digits: str = ".3f") -> str:
    if value is None:
        return "-"
    return f"{value:+{digits}}" + (f" [{ci.low:+{digits}}, {ci.high:+{digits}}]" if ci else "")


def _raw_ci(value: float | None, ci: wire.Interval | None) -> str | None:
    if value is None:
        return None
    return f"{value:.4g}" + (f" [{ci.low:.4g}, {ci.high:.4g}]" if ci else "")


def _measures(s: wire.ScoreSummary | None) -> bool:
    """A gauge read by its measurements (seconds, tokens, ...) rather than by values."""
    return s is not None and s.kind == "gauge" and s.raw_readings > 0


def _side(s: wire.ScoreSummary | None) -> str:
    if s is None:
        return "-"
    if _measures(s):
        return _raw_ci(s.raw_mean, s.raw_mean_ci) or "-"
    return _value_ci(s.mean, s.mean_ci)


def _difference(s: wire.ScoreComparison) -> str:
    if s.kind == "gauge" and (_measures(s.a) or _measures(s.b)):
        return _diff_ci(s.raw_diff, s.raw_diff_ci, ".4g")
    return _diff_ci(s.mean_diff, s.mean_diff_ci)


def _rate_ci(rate: float | None, ci: wire.Interval | None) -> str:
    if rate is None:
        return "-"
    return f"{rate:.1%}" + (f" [{ci.low:.1%}, {ci.high:.1%}]" if ci else "")


def _rates(s: wire.ScoreComparison) -> str | None:
    if s.kind == "gauge":
        return None
    a = f"{s.a.pass_rate:.0%}" if s.a and s.a.pass_rate is not None else "-"
    b = f"{s.b.pass_rate:.0%}" if s.b and s.b.pass_rate is not None else "-"
    return f"{a} → {b}"


def _p(value: float | None) -> str | None:
    if value is None:
        return None
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _paired_count(s: wire.ScoreComparison) -> str:
    if s.kind == "gauge" and (_measures(s.a) or _measures(s.b)):
        return str(s.raw_paired)
    unpaired = s.only_a + s.only_b
    return f"{s.paired}" + (f" (+{unpaired} unpaired)" if unpaired else "")


def _nulls(s: wire.ScoreSummary) -> str | None:
    parts = [
        f"{n} {what}"
        for n, what in (
            (s.skipped, "skipped"),
            (s.errored, "errored"),
            (s.no_value, "no value"),
            (s.failed, "runs failed" if s.failed > 1 else "run failed"),
            (s.missing, "missing"),
        )
        if n
    ]
    return ", ".join(parts) or None
