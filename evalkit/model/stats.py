"""Wire objects of score summaries and experiment comparisons (see docs/compare.md)."""

from __future__ import annotations

from typing import Literal

import msgspec

from evalkit.model.api import Output

ScoreKind = Literal["evaluator", "gauge"]


class Interval(Output, kw_only=True):
    """A two-sided confidence interval (95% unless the answer says otherwise)."""

    low: float
    high: float


class ScoreSummary(Output, kw_only=True):
    """One score name over one experiment's current scoring round."""

    name: str
    kind: ScoreKind
    runs: int
    """Runs of the experiment (every run counts, with or without this score)."""
    failed: int = 0
    """Rows of runs that failed (the agent's task raised, its harness reported the run
    failed): not judged, never averaged, never a reading. ``pass_rate_all`` counts them
    as not passing."""
    readings: int
    """Rows that were not skipped and have a value, or (gauges) a numeric measurement."""
    skipped: int
    """Rows skipped as neutral (an input the agent does not provide)."""
    errored: int
    """Rows whose evaluator failed or timed out (no value)."""
    no_value: int
    """Rows with no value and neither a skip reason nor an error."""
    missing: int
    """Runs with no row of this name at all (the run never reached scoring, or its case
    does not select this evaluator)."""
    values: int
    """Readings with a value in [0, 1] (built-in gauges give only a measurement)."""
    mean: float | None
    """Mean of the values."""
    mean_ci: Interval | None
    """Student t interval of the mean, clipped to [0, 1]; None with fewer than 2 values."""
    binary: bool
    """Every reading is 0 or 1."""
    passes: int | None = None
    """Readings of at least 0.5 (evaluators only; gauges measure, they do not pass)."""
    pass_rate: float | None = None
    """Passes over the readings: the runs that produced an answer (failed runs left out)."""
    pass_rate_ci: Interval | None = None
    """Wilson score interval of the pass rate."""
    pass_rate_all: float | None = None
    """Passes over the readings and the failed runs: a failed run counts as not passing."""
    pass_rate_all_ci: Interval | None = None
    raw_mean: float | None = None
    """Gauges: the mean of their numeric measurements (``raw``: seconds, tokens, USD, ...)."""
    raw_mean_ci: Interval | None = None
    """Student t interval of ``raw_mean`` (not clipped)."""
    raw_readings: int = 0
    pass_at_k: dict[int, float] | None = None
    """With repetitions: the mean over cases of the unbiased pass@k estimate, per k."""
    pass_hat_k: dict[int, float] | None = None
    """With repetitions: the mean over cases of the unbiased pass^k estimate, per k."""
    flaky_cases: int | None = None
    """With repetitions: cases that passed in some runs and failed in others."""


class CaseFlakiness(Output, kw_only=True):
    """One case and evaluator score over an experiment's repetitions."""

    case_id: str
    name: str
    readings: int
    passes: int
    pass_at_k: dict[int, float | None]
    """None where k exceeds the case's readings."""
    pass_hat_k: dict[int, float | None]
    flaky: bool


class RunFailure(Output, kw_only=True):
    """A run that failed (the agent's task raised, its harness reported the run failed) or
    errored (evalkit could not run it): it has no answer, so it was not judged."""

    run_id: int
    case_id: str
    repetition: int
    state: Literal["failed", "errored"]
    error: str | None


FAILURES_LISTED = 50
"""Failed and errored runs an answer lists by name (all of them are counted)."""


class ExperimentScores(Output, kw_only=True):
    experiment_id: int
    round: int
    """The scoring round summarized (the experiment's current one)."""
    repetitions: int
    runs: int
    failed: int = 0
    """Runs that ended ``failed``: the agent failed (its task raised, its harness reported
    the run failed). Their scores are counted apart, never averaged."""
    errored: int = 0
    """Runs that ended ``errored``: evalkit could not run them (harness unreachable, a
    broken contract); they have no scores."""
    failures: list[RunFailure] = msgspec.field(default_factory=list)
    """The first ``FAILURES_LISTED`` failed and errored runs, in run order."""
    confidence: float
    ks: list[int]
    """The k values of pass@k and pass^k (empty without repetitions)."""
    scores: list[ScoreSummary]
    cases: list[CaseFlakiness]
    """Per case and evaluator score, when the experiment has repetitions."""


class UnitChange(Output, kw_only=True):
    """A paired case (and repetition) whose pass/fail differs between the experiments."""

    case_id: str
    repetition: int | None
    """Set when runs are paired by case and repetition."""
    a: float
    b: float


class ScoreComparison(Output, kw_only=True):
    name: str
    kind: ScoreKind
    a: ScoreSummary | None
    """The score in experiment A (all its readings), or None when A has no such score."""
    b: ScoreSummary | None
    paired: int
    """Units (cases, or cases and repetitions) with a reading in both experiments."""
    only_a: int
    """Units with a reading in A and none in B (not run there, or no reading)."""
    only_b: int
    mean_a: float | None
    """Mean of A over the paired units."""
    mean_b: float | None
    mean_diff: float | None
    """Mean of B - A over the paired units (positive: B scores higher)."""
    mean_diff_ci: Interval | None
    """Paired bootstrap percentile interval of ``mean_diff``."""
    regressions: list[UnitChange]
    """Evaluators: paired units passing in A and failing in B."""
    improvements: list[UnitChange]
    both_pass: int | None
    both_fail: int | None
    mcnemar_p: float | None
    """Exact McNemar test (two-sided binomial on the discordant pairs); evaluators only."""
    raw_paired: int = 0
    """Gauges: units with a measurement in both experiments."""
    raw_diff: float | None = None
    """Gauges: mean of B - A of the measurements over those units."""
    raw_diff_ci: Interval | None = None
    """Paired bootstrap percentile interval of ``raw_diff``."""


class GateResult(Output, kw_only=True):
    gate: str
    passed: bool
    actual: float | None
    threshold: float | None
    message: str


class Comparison(Output, kw_only=True):
    a: int
    b: int
    a_round: int
    b_round: int
    paired_by: Literal["case", "case+repetition"]
    cases_only_a: list[str]
    """Cases run in A and not in B (their scores are unpaired)."""
    cases_only_b: list[str]
    confidence: float
    seed: int
    resamples: int
    scores: list[ScoreComparison]
    regressions: int
    """Regressions over every evaluator score."""
    improvements: int
    runs_a: int = 0
    runs_b: int = 0
    failed_a: int = 0
    """Runs of A that failed (the agent failed; see ``ExperimentScores.failed``)."""
    failed_b: int = 0
    errored_a: int = 0
    """Runs of A that errored (evalkit could not run them)."""
    errored_b: int = 0
    failed_rose: bool = False
    """B's share of failed runs is above A's."""
    new_failures: list[RunFailure] = msgspec.field(default_factory=list)
    """Runs of B that failed where their unit (case, or case and repetition) had no failed
    run in A (the first ``FAILURES_LISTED``; ``new_failure_count`` counts them all).
    ``--gate-no-regressions`` counts them unless a gate names failed runs."""
    new_failure_count: int = 0
    gates: list[GateResult]
    passed: bool
    """Every gate passed (True when no gate was given)."""


class Disagreement(Output, kw_only=True):
    run_id: int
    case_id: str
    scored: float
    """The evaluator's value."""
    people_pass: bool
    """The people's verdict (the majority of each labeller's latest label)."""
    labellers: int


class Agreement(Output, kw_only=True):
    """How often one score's evaluator agrees with the people who labelled its runs."""

    name: str
    runs: int
    """Runs with the score and a people's verdict."""
    agree: int
    rate: float | None
    interval: tuple[float, float] | None
    """Wilson interval of the rate."""
    kappa: float | None
    """Cohen's kappa; None when undefined (both sides gave one verdict only)."""
    confusion: dict[str, int]
    """``EVALUATOR_PEOPLE`` counts: pass_pass, pass_fail, fail_pass, fail_fail."""
    split: int
    """Runs whose labellers tied, left out of the counts."""
    disagreements: list[Disagreement]
