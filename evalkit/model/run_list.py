"""Wire objects of the paged reads behind the web UI: experiments with their score means,
one page of an experiment's runs, the distributions its charts draw, and two experiments
side by side case by case. Each answers in bounded work however many runs there are."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from evalkit.model.api import Output
from evalkit.model.runs import RunState

ScoreKind = Literal["evaluator", "gauge"]


class ScoreMean(Output, kw_only=True):
    """One score name over an experiment's current scoring round."""

    name: str
    kind: ScoreKind
    readings: int
    """Rows with a value (evaluators) or a numeric measurement (gauges), not skipped."""
    mean: float | None = None
    """The mean value in [0, 1] (evaluators)."""
    raw_mean: float | None = None
    """The mean measurement (gauges: seconds, tokens, USD, a count)."""


class ExperimentBrief(Output, kw_only=True):
    """An experiment as lists show it: where it lives, what ran, how far it got."""

    id: int
    workspace: str
    dataset: str
    """``name@workspace``."""
    agent: str
    """``name@workspace``."""
    driver: Literal["server", "cli", "sdk"]
    status: Literal["running", "finished"]
    repetitions: int
    model: str | None
    split: str | None
    created_at: datetime
    created_by: str | None
    finished_at: datetime | None
    scoring_round: int
    runs: int
    by_state: dict[str, int]
    scores: list[ScoreMean] = msgspec.field(default_factory=list)
    """The current round's mean per score name (empty before any run is scored)."""


class ExperimentPage(Output, kw_only=True):
    """One page of experiments, newest first."""

    total: int
    """Experiments matching the filters (every page)."""
    offset: int
    limit: int
    experiments: list[ExperimentBrief]


class RunScore(Output, kw_only=True):
    """A run's score of one name in the experiment's current round."""

    name: str
    kind: ScoreKind
    value: float | None
    raw: Any = None
    skipped: bool = False
    error: bool = False


class RunListItem(Output, kw_only=True):
    id: int
    case_id: str
    repetition: int
    state: RunState
    harness_status: str | None
    error: str | None
    timed_out: bool
    attempts: int
    tags: list[str]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    seconds: float | None
    """Wall time from the start to the harness's final status (or the run's end)."""
    cost_usd: float | None
    """The ``cost`` score's measurement, else the trajectory's ``final_metrics``."""
    trajectory_valid: bool | None
    trajectory_partial: bool | None
    scores: list[RunScore]


class RunPage(Output, kw_only=True):
    """One page of an experiment's runs, in run order, with the filters' choices."""

    experiment: ExperimentBrief
    """Without its score means (``GET /api/experiments/{id}/brief`` has them)."""
    total: int
    """Runs matching the filters (every page)."""
    offset: int
    limit: int
    runs: list[RunListItem]
    tags: list[str]
    """Every tag of the experiment's cases (the ``tag`` filter's choices)."""
    score_version: str
    """Changes whenever a score of the current round is added: a cache key for summaries."""


class Histogram(Output, kw_only=True):
    """Counts of values in equal-width bins from ``low`` to ``high``."""

    low: float
    high: float
    counts: list[int]


class ScoreDistribution(Output, kw_only=True):
    name: str
    histogram: Histogram
    """Evaluator values in ten bins over [0, 1] (a binary score fills the first and last)."""


class Measure(Output, kw_only=True):
    """A per-run measurement over the experiment's runs."""

    unit: str
    runs: int
    """Runs with a measurement."""
    p50: float | None
    p95: float | None
    max: float | None
    histogram: Histogram | None
    """None when no run has a measurement."""


class ExperimentCharts(Output, kw_only=True):
    experiment_id: int
    round: int
    scores: list[ScoreDistribution]
    latency: Measure
    """Seconds from start to the harness's final status (or the run's end)."""
    cost: Measure
    """USD per run (the ``cost`` score, else the trajectory's ``final_metrics``)."""


class CaseScores(Output, kw_only=True):
    """One score name of one case in both experiments: the mean over its repetitions."""

    name: str
    a: float | None
    b: float | None
    change: Literal["regression", "improvement", "same", "only_a", "only_b"]
    """Pass (at least 0.5) in A and fail in B is a regression; the reverse an improvement."""


class CaseRow(Output, kw_only=True):
    case_id: str
    runs_a: int
    runs_b: int
    failed_a: int = 0
    """Runs of the case that failed in A (not judged: their scores are not in the means)."""
    failed_b: int = 0
    regressions: int
    """Score names of this case that regress."""
    improvements: int
    scores: list[CaseScores]


class CaseComparison(Output, kw_only=True):
    """Experiments A (the baseline) and B (the new one) case by case, regressions first."""

    a: ExperimentBrief
    """Without its score means, as ``b``."""
    b: ExperimentBrief
    total: int
    """Cases matching the filters (every page)."""
    offset: int
    limit: int
    names: list[str]
    """Evaluator score names of either experiment's current round."""
    cases: list[CaseRow]
    score_version: str
    """Changes whenever a score of either experiment's current round is added."""
