"""Score statistics: per-experiment summaries, flakiness, comparing two experiments, gates.

Pure functions over score rows (no database, no I/O); ``docs/compare.md`` explains each
statistic for users. The rules, in one place:

- A run that **failed** (state ``failed``: the agent's task raised, its harness reported
  the run failed) is not judged: its rows, whatever they hold (a "run failed" skip, or the
  0 of an older round), are counted as ``failed`` and never read. Means and pass rates are
  over the runs that produced an answer; ``pass_rate_all`` counts failed rows as not
  passing. A run that **errored** (evalkit could not run it) has no rows; it is counted
  apart from the failed ones.
- A score row is a **reading** when it was not skipped and has a value, or (a gauge) a
  numeric measurement in ``raw``. Skipped rows, errored rows and other rows without either
  are counted (and reported) but never enter a mean or a rate; runs without a row of a
  name are counted as ``missing``. Means of values and of measurements are kept apart.
- A reading **passes** when its value is at least ``PASS_THRESHOLD`` (0.5). For a binary
  score (every value 0 or 1, as the built-in checks give) that is exactly "1 passes, 0
  fails", so its pass rate equals its mean. Gauges measure (latency, tokens, cost): they
  have a mean, never a pass rate, regressions or McNemar test.
- Intervals are 95%: Wilson score interval for pass rates; Student t interval for means
  (clipped to [0, 1]); a paired percentile bootstrap for the mean difference of a
  comparison, seeded so the same data always gives the same interval (numpy, vectorised:
  70 to 100 ms of a core for 10,000 pairs and 2000 resamples).
- pass@k = 1 - C(n-c, k) / C(n, k) and pass^k = C(c, k) / C(n, k), per case, from its n
  readings of which c pass (unbiased estimators of "at least one of k runs passes" and
  "all k runs pass"); an experiment's value is their mean over cases with n >= k.
- A comparison pairs runs by case, and by case and repetition when both experiments have
  repetitions. A unit's value is the mean of its readings; it passes by the reading rule.
  A regression is a paired unit passing in A (the baseline) and failing in B; an
  improvement the reverse. McNemar's exact test is the two-sided binomial test (p = 1/2)
  on those discordant pairs.

The passes over the rows (which are readings, which runs failed, which units pair) are
numpy work in ``arrays``; the definitions above are the numbers they give.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Literal, TypeVar

import msgspec

from evalkit.model import stats as wire

if TYPE_CHECKING:
    import numpy as np

    from evalkit.scoring.arrays import ScoreColumns

PASS_THRESHOLD = 0.5
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
MAX_RESAMPLES = 20000
DEFAULT_KS = (1, 2, 3, 5, 10, 20, 50, 100)
_EPS = 1e-9
T = TypeVar("T")


class StatsError(ValueError):
    """A request the statistics cannot answer (a bad gate, a bad k); the message says why."""


# --------------------------------------------------------------------------- input


FAILED = "failed"
"""The state of a run the agent failed (its task raised, its harness reported it failed)."""
ERRORED = "errored"
"""The state of a run evalkit could not run (harness unreachable, a broken contract)."""


@dataclass(frozen=True)
class RunKey:
    run_id: int
    case_id: str
    repetition: int
    state: str = "done"
    error: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ScoreRow:
    """One row of ``scores`` (of the round being summarized)."""

    run_id: int
    name: str
    value: float | None
    kind: str = "evaluator"
    skipped: str | None = None
    error: str | None = None
    raw: object = None

    reading: float | None = field(init=False, repr=False, compare=False)
    """The value, when this row is a reading with one."""
    measurement: float | None = field(init=False, repr=False, compare=False)
    """A gauge's numeric measurement (``raw``), when this row is a reading with one."""
    is_reading: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Worked out once per row: a comparison reads each several times, over 100,000 rows.
        reading = self.value if self.skipped is None else None
        measurement = None
        raw = self.raw
        if (
            self.skipped is None
            and self.kind == "gauge"
            and isinstance(raw, int | float)
            and not isinstance(raw, bool)
            and math.isfinite(raw)
        ):
            measurement = float(raw)
        object.__setattr__(self, "reading", reading)
        object.__setattr__(self, "measurement", measurement)
        object.__setattr__(self, "is_reading", reading is not None or measurement is not None)


@dataclass
class ExperimentReadings:
    """What the statistics need of one experiment: its runs and its current round's scores,
    as rows (``rows``) or already as columns by score name (``columns``, as the store reads
    them)."""

    experiment_id: int
    round: int
    repetitions: int
    runs: list[RunKey]
    rows: list[ScoreRow] = field(default_factory=list)
    columns: dict[str, ScoreColumns] | None = None

    def in_state(self, state: str) -> list[RunKey]:
        return [run for run in self.runs if run.state == state]

    def by_name(self) -> dict[str, ScoreColumns]:
        """The scores as columns by score name, sorted (made from ``rows`` once)."""
        if self.columns is None:
            from evalkit.scoring import arrays

            self.columns = arrays.columns_by_name(self.rows)
        return self.columns


def failures(runs: Iterable[RunKey]) -> list[wire.RunFailure]:
    """The failed and errored runs, in run order, the first ``FAILURES_LISTED``."""
    found = [run for run in runs if run.state in (FAILED, ERRORED)]
    found.sort(key=lambda run: run.run_id)
    return [_failure(run) for run in found[: wire.FAILURES_LISTED]]


def _failure(run: RunKey) -> wire.RunFailure:
    return wire.RunFailure(
        run_id=run.run_id,
        case_id=run.case_id,
        repetition=run.repetition,
        state=FAILED if run.state == FAILED else ERRORED,
        error=run.error,
    )


def passes(value: float) -> bool:
    return value >= PASS_THRESHOLD


# --------------------------------------------------------------------------- intervals


def normal_quantile(p: float) -> float:
    return NormalDist().inv_cdf(p)


def wilson_interval(
    successes: int, n: int, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """Wilson score interval of a proportion; None when there are no trials."""
    if n <= 0:
        return None
    z = normal_quantile(1 - (1 - confidence) / 2)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's method for the continued fraction of the incomplete beta function."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            step = d * c
            h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """The Student t distribution's CDF."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


# A bisection of ~40 steps: a summary asks again for the same few (p, df).
@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The Student t quantile, by bisection on ``t_cdf`` (to about 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be strictly between 0 and 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12:
            break
    return (low + high) / 2.0


def mean(values: Sequence[float]) -> float | None:
    return _mean(values) if values else None


def _mean(values: Sequence[float]) -> float:
    """The mean of some finite readings; a sum beyond the float range (gauges near 1e308)
    is taken over the values already divided by their count, so it never overflows."""
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def t_interval(
    values: Sequence[float], confidence: float = CONFIDENCE, *, clip: bool = True
) -> tuple[float, float] | None:
    """Student t interval of a mean (None under 2 values), clipped to [0, 1] for scores."""
    n = len(values)
    if n < 2:
        return None
    try:
        m = math.fsum(values) / n
        spread = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1) / n)
    except OverflowError:
        # Readings so large that their squares leave the float range: the same arithmetic
        # on the readings divided by the largest of them, scaled back.
        scale = max(abs(v) for v in values)
        m = math.fsum(v / scale for v in values) / n
        spread = scale * math.sqrt(math.fsum((v / scale - m) ** 2 for v in values) / (n - 1) / n)
        m *= scale
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * spread
    low, high = m - half, m + half
    if not (math.isfinite(low) and math.isfinite(high)):
        return None  # an interval wider than the float range says nothing
    return (max(0.0, low), min(1.0, high)) if clip else (low, high)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default method)."""
    position = q * (len(sorted_values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(sorted_values) - 1)
    fraction = position - below
    return sorted_values[below] + (sorted_values[above] - sorted_values[below]) * fraction


def _generator(seed: int | str) -> np.random.Generator:
    """numpy's PCG64 generator seeded from the SHA-256 of ``str(seed)``: any text or number
    gives its own fixed stream, on every platform and numpy version that keeps PCG64."""
    # numpy is imported here, not at the top: every CLI start imports this module, and
    # numpy would cost each one about 0.15 s.
    import numpy as np

    digest = hashlib.sha256(str(seed).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "big"))


_BLOCK_DRAWS = 1 << 18
"""Draws made at once (2 MB of doubles): resamples are drawn in blocks of whole resamples,
so memory stays flat however many pairs and resamples there are (and a block stays near
the CPU's caches: blocks of 2**18 draws took 0.7 to 0.8 of the time blocks of 2**20 did)."""


def paired_bootstrap(
    differences: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int | str = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of paired differences: resample the pairs
    with replacement ``resamples`` times, take the middle ``confidence`` of the resampled
    means. None under 2 pairs.

    Resample r draws n uniforms u in [0, 1) from ``_generator(seed)`` (row r of one
    ``random((resamples, n))`` call; drawn in blocks, which gives the same numbers) and
    takes the pairs at ``floor(u * n)``; its mean is numpy's ``mean`` of those differences.
    The interval is the linear-interpolation percentiles of the sorted means."""
    n = len(differences)
    if n < 2:
        return None
    if max(differences) == min(differences):
        return differences[0], differences[0]
    rng = _generator(seed)
    import numpy as np

    population = np.asarray(differences, dtype=np.float64)
    table = _small_integers(population)
    block = min(resamples, max(1, _BLOCK_DRAWS // n))
    uniforms = np.empty((block, n), dtype=np.float64)
    picks = np.empty((block, n), dtype=np.intp)
    drawn = np.empty((block, n), dtype=population.dtype if table is None else table.dtype)
    sums = np.empty(resamples, dtype=np.float64 if table is None else np.int64)
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        u, at, values = uniforms[:rows], picks[:rows], drawn[:rows]
        rng.random(out=u)
        np.multiply(u, n, out=u)
        np.copyto(at, u, casting="unsafe")  # floor: u * n is never negative
        # u * n rounds up to n only for u a hair below 1: "clip" takes pair n - 1 then.
        np.take(population if table is None else table, at, out=values, mode="clip")
        np.add.reduce(values, axis=1, dtype=sums.dtype, out=sums[start : start + rows])
    means = sums / n
    means.sort()
    alpha = 1 - confidence
    ordered = means.tolist()
    return percentile(ordered, alpha / 2), percentile(ordered, 1 - alpha / 2)


def _small_integers(population: np.ndarray) -> np.ndarray | None:
    """The differences as int8 when every one is a whole number from -127 to 127 (and none
    is -0.0), as those of pass/fail scores are: a resample's sum is then the same number
    summed as integers, and an 8-byte draw moves one byte instead of eight. None otherwise."""
    import numpy as np

    if not np.all(np.abs(population) <= 127) or not np.all(population == np.trunc(population)):
        return None
    if np.any(np.signbit(population) & (population == 0)):
        return None
    return population.astype(np.int8)


def mcnemar_exact(regressions: int, improvements: int) -> float:
    """Two-sided exact McNemar p-value: binomial(b + c, 1/2) on the discordant pairs."""
    n = regressions + improvements
    if n == 0:
        return 1.0
    # C(n, i + 1) = C(n, i) * (n - i) / (i + 1), exactly in integers: one multiplication
    # per term instead of a math.comb each (thousands of discordant pairs took 0.3 s).
    term = tail = 1
    for i in range(min(regressions, improvements)):
        term = term * (n - i) // (i + 1)
        tail += term
    return min(1.0, 2 * tail / 2**n)


# --------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased estimate that at least one of k runs passes, from n runs with c passing."""
    if k < 1 or k > n:
        return None
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """Unbiased estimate that all k runs pass (pass^k), from n runs with c passing."""
    if k < 1 or k > n:
        return None
    return math.comb(c, k) / math.comb(n, k)


def resolve_ks(repetitions: int, ks: Iterable[int] | None = None) -> list[int]:
    """The k values to report: 1, 2, 3, 5, 10, 20, 50, 100 up to the repetitions, and the
    repetitions themselves; or the caller's, each from 1 to the repetitions."""
    if repetitions <= 1:
        if ks:
            raise StatsError(
                "pass@k needs repetitions; this experiment ran each case once "
                "(run with --repetitions N)"
            )
        return []
    if not ks:
        return sorted({k for k in DEFAULT_KS if k <= repetitions} | {repetitions})
    chosen = sorted(set(ks))
    bad = [k for k in chosen if not 1 <= k <= repetitions]
    if bad:
        raise StatsError(
            f"k must be from 1 to the experiment's repetitions ({repetitions}); "
            f"got {', '.join(map(str, bad))}"
        )
    return chosen


# --------------------------------------------------------------------------- summaries
# The passes over the rows are in ``arrays`` (numpy), imported when first needed.


def summarize_name(
    name: str,
    rows: Sequence[ScoreRow],
    runs: Sequence[RunKey],
    *,
    ks: Sequence[int] = (),
    confidence: float = CONFIDENCE,
) -> tuple[wire.ScoreSummary, list[wire.CaseFlakiness]]:
    """One score name of one experiment, and its per-case flakiness when ``ks`` is given.
    The rows of failed runs are counted as ``failed``, never read."""
    from evalkit.scoring import arrays

    columns = arrays.ScoreColumns.from_rows(rows)
    return arrays.summarize_name(name, columns, arrays.RunIndex(runs), ks=ks, confidence=confidence)


def summarize(
    data: ExperimentReadings,
    *,
    ks: Iterable[int] | None = None,
    confidence: float = CONFIDENCE,
) -> wire.ExperimentScores:
    """Every score name of an experiment; pass@k and pass^k per case with repetitions."""
    from evalkit.scoring import arrays

    chosen = resolve_ks(data.repetitions, ks)
    index = arrays.RunIndex(data.runs)
    scores, cases = [], []
    for name, columns in data.by_name().items():
        summary, flakiness = arrays.summarize_name(
            name, columns, index, ks=chosen, confidence=confidence
        )
        scores.append(summary)
        cases.extend(flakiness)
    cases.sort(key=lambda c: (c.case_id, c.name))
    return wire.ExperimentScores(
        experiment_id=data.experiment_id,
        round=data.round,
        repetitions=data.repetitions,
        runs=len(data.runs),
        failed=len(data.in_state(FAILED)),
        errored=len(data.in_state(ERRORED)),
        failures=failures(data.runs),
        confidence=confidence,
        ks=chosen,
        scores=scores,
        cases=cases,
    )


# --------------------------------------------------------------------------- comparison

Unit = tuple[str, int | None]


def _unit(run: RunKey, by_repetition: bool) -> Unit:
    return run.case_id, run.repetition if by_repetition else None


def new_failures(a: ExperimentReadings, b: ExperimentReadings, by_repetition: bool) -> list[RunKey]:
    """B's failed runs whose unit ran in A without failing there, in run order."""
    ran_a = {_unit(run, by_repetition) for run in a.runs}
    failed_a = {_unit(run, by_repetition) for run in a.in_state(FAILED)}
    found = [
        run
        for run in b.in_state(FAILED)
        if _unit(run, by_repetition) in ran_a and _unit(run, by_repetition) not in failed_a
    ]
    return sorted(found, key=lambda run: run.run_id)


def _failed_share(data: ExperimentReadings) -> float:
    return len(data.in_state(FAILED)) / len(data.runs) if data.runs else 0.0


PARALLEL_RUNS = 2000
"""Runs (both experiments') from which score names are compared on several threads at
once: the bootstrap's draws and sums are numpy work, done with the GIL released, and each
name has its own seeded generator, so the numbers do not depend on the threads."""
_THREADS = max(1, min(4, os.cpu_count() or 1))


def _each(work: Callable[[str], T], names: Sequence[str], *, parallel: bool) -> list[T]:
    """``work`` of each name, in order; on ``_THREADS`` threads when ``parallel``."""
    if not parallel or _THREADS == 1 or len(names) < 2:
        return [work(name) for name in names]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(_THREADS, len(names))) as pool:
        return list(pool.map(work, names))


def compare(
    a: ExperimentReadings,
    b: ExperimentReadings,
    *,
    gates: Sequence[Gate] = (),
    no_regressions: bool = False,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> wire.Comparison:
    """Compare B (the new experiment) with A (the baseline), and check the gates on B."""
    if not 100 <= resamples <= MAX_RESAMPLES:
        raise StatsError(f"resamples must be from 100 to {MAX_RESAMPLES}, got {resamples}")
    from evalkit.scoring import arrays

    by_repetition = a.repetitions > 1 and b.repetitions > 1
    columns_a, columns_b = a.by_name(), b.by_name()
    units = arrays.Units(a.runs, b.runs, by_repetition)
    side_a = arrays.Side(a, arrays.RunIndex(a.runs), units.of_a)
    side_b = arrays.Side(b, arrays.RunIndex(b.runs), units.of_b)

    def one(name: str) -> wire.ScoreComparison:
        return arrays.compare_name(
            name,
            side_a,
            side_b,
            columns_a.get(name, arrays.EMPTY),
            columns_b.get(name, arrays.EMPTY),
            units,
            seed=seed,
            resamples=resamples,
            confidence=confidence,
        )

    names = sorted(set(columns_a) | set(columns_b))
    scores = _each(one, names, parallel=len(a.runs) + len(b.runs) >= PARALLEL_RUNS)
    cases_a = {run.case_id for run in a.runs}
    cases_b = {run.case_id for run in b.runs}
    newly_failed = new_failures(a, b, by_repetition)
    comparison = wire.Comparison(
        a=a.experiment_id,
        b=b.experiment_id,
        a_round=a.round,
        b_round=b.round,
        paired_by="case+repetition" if by_repetition else "case",
        cases_only_a=sorted(cases_a - cases_b),
        cases_only_b=sorted(cases_b - cases_a),
        confidence=confidence,
        seed=seed,
        resamples=resamples,
        scores=scores,
        regressions=sum(len(s.regressions) for s in scores),
        improvements=sum(len(s.improvements) for s in scores),
        runs_a=len(a.runs),
        runs_b=len(b.runs),
        failed_a=len(a.in_state(FAILED)),
        failed_b=len(b.in_state(FAILED)),
        errored_a=len(a.in_state(ERRORED)),
        errored_b=len(b.in_state(ERRORED)),
        failed_rose=_failed_share(b) > _failed_share(a),
        new_failures=[_failure(run) for run in newly_failed[: wire.FAILURES_LISTED]],
        new_failure_count=len(newly_failed),
        gates=[],
        passed=True,
    )
    allowed = failures_gated(gates)
    results = [check_gate(gate, comparison, failures_allowed=allowed) for gate in gates]
    if no_regressions:
        results.append(check_no_regressions(comparison, failures_allowed=allowed))
    comparison.gates = results
    comparison.passed = all(r.passed for r in results)
    return comparison


# --------------------------------------------------------------------------- gates

Operator = Literal[">=", ">", "<=", "<", "=="]
Stat = Literal[
    "mean",
    "pass_rate",
    "pass_rate_all",
    "diff",
    "raw_mean",
    "raw_diff",
    "failed",
    "failed_rate",
    "errored",
    "errored_rate",
    "agreement",
]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda x, t: x >= t - _EPS,
    ">": lambda x, t: x > t + _EPS,
    "<=": lambda x, t: x <= t + _EPS,
    "<": lambda x, t: x < t - _EPS,
    "==": lambda x, t: abs(x - t) <= _EPS,
}
STATS: tuple[Stat, ...] = (
    "mean",
    "pass_rate",
    "pass_rate_all",
    "diff",
    "raw_mean",
    "raw_diff",
    "agreement",
)
RUN_STATS: tuple[Stat, ...] = ("failed", "failed_rate", "errored", "errored_rate")
"""Gates on experiment B's runs rather than on a score: written alone (``failed<=0``)."""
FAILURE_STATS: tuple[Stat, ...] = ("failed", "failed_rate")
_STAT_TEXT = {
    "mean": "mean",
    "pass_rate": "pass rate",
    "pass_rate_all": "pass rate of all runs (failed runs as not passing)",
    "diff": "mean difference (B - A)",
    "raw_mean": "mean measurement",
    "raw_diff": "measurement difference (B - A)",
    "failed": "failed runs",
    "failed_rate": "share of failed runs",
    "errored": "errored runs",
    "errored_rate": "share of errored runs",
    "agreement": "agreement with human labels",
}
_RANGES: dict[str, tuple[float, float]] = {
    "mean": (0, 1),
    "pass_rate": (0, 1),
    "pass_rate_all": (0, 1),
    "diff": (-1, 1),
    "failed_rate": (0, 1),
    "errored_rate": (0, 1),
    "agreement": (0, 1),
}
_OPERATOR_RE = re.compile(r"(>=|<=|==|!=|=>|=<|>|<|=)")
_MISTYPED = {"=>": ">=", "=<": "<=", "=": "=="}
_FORM = (
    "write a gate as SCORE[.STAT] OP NUMBER, e.g. accuracy>=0.8 or judge.pass_rate>=0.9, "
    "or on the runs, failed<=0 or failed_rate<=0.05"
)
GATE_HELP = (
    "SCORE[.STAT] OP NUMBER: STAT is mean (the default), pass_rate (over the runs that "
    "answered), pass_rate_all (failed runs count as not passing), diff (mean of B - A over "
    "paired cases), raw_mean or raw_diff (a gauge's measurement: seconds, tokens, ...); "
    "agreement (how often the score agrees with B's human labels; no labels fail it), "
    "or a gate on B's runs: failed, failed_rate, errored or errored_rate. OP is >=, >, <=, "
    "< or ==. While runs of B failed, a gate on a score fails too, unless a failed or "
    "failed_rate gate says how many may fail."
)


@dataclass(frozen=True)
class Gate:
    text: str
    name: str
    """The score gated; empty for a gate on the runs (``failed<=0``)."""
    stat: Stat
    operator: Operator
    threshold: float

    @property
    def on_runs(self) -> bool:
        return self.stat in RUN_STATS


def failures_gated(gates: Iterable[Gate]) -> bool:
    """Some gate says how many runs of B may fail (``failed`` or ``failed_rate``): the
    score gates then read the runs that answered, and leave the failed ones to it."""
    return any(gate.stat in FAILURE_STATS for gate in gates)


def parse_gate(text: str) -> Gate:
    """``accuracy>=0.8``, ``judge.pass_rate>0.9``, ``latency.raw_mean<=30``,
    ``accuracy.diff>=-0.05``, ``failed<=0``, ``failed_rate<=0.05``; StatsError naming the
    problem otherwise."""
    shown = text.strip()
    found = list(_OPERATOR_RE.finditer(shown))
    if not found:
        raise StatsError(f"gate {shown!r} has no comparison; {_FORM}")
    if len(found) > 1:
        raise StatsError(f"gate {shown!r} has more than one comparison; {_FORM}")
    match = found[0]
    operator = match[1]
    if operator not in OPERATORS:
        hint = f"did you mean {_MISTYPED[operator]}? " if operator in _MISTYPED else ""
        raise StatsError(
            f"gate {shown!r}: {operator!r} is not a gate operator; {hint}"
            "use one of >=, >, <=, <, =="
        )
    left, right = shown[: match.start()].strip(), shown[match.end() :].strip()
    name, stat = _gated(shown, left)
    threshold = _threshold(shown, right)
    bounds = _RANGES.get(stat)
    if bounds is not None and not bounds[0] <= threshold <= bounds[1]:
        low, high = (f"{bound:g}" for bound in bounds)
        raise StatsError(
            f"gate {shown!r}: a {_STAT_TEXT[stat]} lies from {low} to {high}, "
            f"so {threshold:g} can never be met the way you mean; "
            + ("write rates as fractions " if stat in RUN_STATS else "scores are fractions ")
            + "(0.8, not 80)"
        )
    if stat in ("failed", "errored") and threshold < 0:
        raise StatsError(f"gate {shown!r}: a count of runs is never below 0")
    return Gate(shown, name, stat, operator, threshold)  # type: ignore[arg-type]


def _gated(shown: str, left: str) -> tuple[str, Stat]:
    """(score name, stat) of a gate's left side; ("", stat) for a gate on the runs. A score
    named like a run stat is gated with its stat written out (``failed.mean``)."""
    if left in RUN_STATS:
        return "", left  # type: ignore[return-value]
    name, stat = left, "mean"
    for candidate in STATS:
        if left.endswith("." + candidate):
            name, stat = left[: -len(candidate) - 1].strip(), candidate
            break
    if not name:
        raise StatsError(f"gate {shown!r} names no score; {_FORM}")
    return name, stat  # type: ignore[return-value]


def _threshold(shown: str, right: str) -> float:
    if right.endswith("%"):
        raise StatsError(f"gate {shown!r}: write rates as fractions (0.8 for 80%)")
    try:
        threshold = float(right)
    except ValueError:
        raise StatsError(
            f"gate {shown!r}: {right or 'nothing'!r} is not a number; {_FORM}"
        ) from None
    if not math.isfinite(threshold):
        raise StatsError(f"gate {shown!r}: the threshold must be a finite number")
    return threshold


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _verdict(gate: Gate, label: str, actual: float) -> wire.GateResult:
    """A gate's result once its value is known: passed, or by how much it missed."""
    if OPERATORS[gate.operator](actual, gate.threshold):
        message = f"{label} {_fmt(actual)} {gate.operator} {_fmt(gate.threshold)}"
        return _result(gate, True, message, actual)
    gap = abs(actual - gate.threshold)
    if gate.operator in (">=", ">"):
        by = f"short by {_fmt(gap)}" if gap > _EPS else "equal to it, and the gate needs more"
    elif gate.operator in ("<=", "<"):
        by = f"over by {_fmt(gap)}" if gap > _EPS else "equal to it, and the gate needs less"
    else:
        by = f"off by {_fmt(gap)}"
    message = f"{label} {_fmt(actual)} is not {gate.operator} {_fmt(gate.threshold)} ({by})"
    return _result(gate, False, message, actual)


def _result(gate: Gate, passed: bool, message: str, actual: float | None = None) -> wire.GateResult:
    return wire.GateResult(
        gate=gate.text, passed=passed, actual=actual, threshold=gate.threshold, message=message
    )


def check_agreement_gate(
    gate: Gate, agreement: wire.Agreement | None, experiment: int
) -> wire.GateResult:
    """``judge.agreement>=0.8``: how often the score agreed with the people who labelled
    experiment ``experiment``'s runs. A score nobody labelled fails: it was never checked."""
    if agreement is None or not agreement.runs or agreement.rate is None:
        return _result(
            gate,
            False,
            f"no human label of {gate.name} on experiment {experiment}'s runs, so its "
            f"agreement with people is unknown and the gate does not trust it; label runs "
            f"with `evalkit runs label RUN --score {gate.name}=pass|fail`",
        )
    label = (
        f"agreement of {gate.name} with human labels on experiment {experiment} "
        f"({agreement.agree} of {agreement.runs} runs):"
    )
    return _verdict(gate, label, agreement.rate)


MONITOR_STATS: tuple[Stat, ...] = ("mean", "pass_rate", "raw_mean")
"""What a gate on a monitor's scores compares; the others need an experiment's runs."""


def check_monitor_gate(
    gate: Gate,
    reading: tuple[int, float | None, float | None, float | None] | None,
    window: str,
) -> wire.GateResult:
    """A gate on a monitor's score over ``window``; ``reading`` is its (readings, mean,
    pass rate, mean measurement), None when the score has no reading in the window."""
    if gate.stat not in MONITOR_STATS:
        return _result(
            gate,
            False,
            f"{gate.stat} needs an experiment's runs; a monitor's score is gated on "
            f"{', '.join(MONITOR_STATS)} (e.g. {gate.name}.pass_rate>=0.8)",
        )
    if reading is None or reading[0] == 0:
        return _result(
            gate,
            False,
            f"{gate.name} has no reading in the last {window}, so the gate cannot be met; "
            "check that the monitor scores with it and that its agent sent sessions",
        )
    n, mean_value, pass_rate, raw_mean = reading
    actual = {"mean": mean_value, "pass_rate": pass_rate, "raw_mean": raw_mean}[gate.stat]
    if actual is None:
        kind = "measurement" if gate.stat == "raw_mean" else "value in [0, 1]"
        return _result(
            gate,
            False,
            f"{gate.name} gives no {kind} to compare; gate "
            + ("its raw_mean" if gate.stat != "raw_mean" else "its mean or pass_rate"),
        )
    return _verdict(gate, f"{_STAT_TEXT[gate.stat]} of {gate.name} over {n} sessions", actual)


def check_gate(
    gate: Gate, comparison: wire.Comparison, *, failures_allowed: bool = False
) -> wire.GateResult:
    """A gate on experiment B (or, for ``diff`` and ``raw_diff``, on B - A over the paired
    units; for ``failed`` and the like, on B's runs). A gate on a score also fails while
    runs of B that it would judge failed, unless ``failures_allowed`` (a failed gate was
    given)."""
    if gate.on_runs:
        return _check_runs(gate, comparison)
    result, score = _check_score(gate, comparison)
    if score is None or score.b is None or gate.stat == "pass_rate_all" or failures_allowed:
        return result
    return _with_failures(result, score.b.failed, comparison.b, score.name)


def _check_runs(gate: Gate, comparison: wire.Comparison) -> wire.GateResult:
    count = comparison.failed_b if gate.stat.startswith("failed") else comparison.errored_b
    what = "failed" if gate.stat.startswith("failed") else "errored"
    if gate.stat in ("failed", "errored"):
        label = f"{what} runs of experiment {comparison.b}:"
        return _verdict(gate, label, float(count))
    label = f"share of {what} runs of experiment {comparison.b} ({count} of {comparison.runs_b}):"
    return _verdict(gate, label, count / comparison.runs_b if comparison.runs_b else 0.0)


def _with_failures(
    result: wire.GateResult, failed: int, experiment: int, name: str
) -> wire.GateResult:
    """A score gate's result once B's failed runs are known: it fails when any did."""
    if not failed:
        return result
    runs = "run" if failed == 1 else "runs"
    note = (
        f"{failed} {runs} of experiment {experiment} failed and were not judged by {name} "
        '(allow some with --gate "failed<=N", or gate '
        f"{name}.pass_rate_all to count them as not passing)"
    )
    message = f"{result.message}; but {note}" if result.passed else f"{result.message}; {note}"
    return msgspec.structs.replace(result, passed=False, message=message)


def _check_score(
    gate: Gate, comparison: wire.Comparison
) -> tuple[wire.GateResult, wire.ScoreComparison | None]:
    score = next((s for s in comparison.scores if s.name == gate.name), None)
    differences = gate.stat in ("diff", "raw_diff")
    if score is None or (not differences and score.b is None):
        names = sorted(s.name for s in comparison.scores if s.b is not None)
        known = f"its scores are {', '.join(names)}" if names else "it has no scores"
        message = f"experiment {comparison.b} has no score named {gate.name!r} ({known})"
        return _result(gate, False, message), None
    if gate.stat in ("pass_rate", "pass_rate_all") and score.kind == "gauge":
        message = (
            f"{gate.name} is a gauge: it measures and has no pass rate; "
            f"gate {gate.name}.raw_mean (or its mean)"
        )
        return _result(gate, False, message), None
    if differences:
        actual = score.mean_diff if gate.stat == "diff" else score.raw_diff
        count = score.paired if gate.stat == "diff" else score.raw_paired
        where = f"over {count} paired units"
    else:
        assert score.b is not None
        actual = getattr(score.b, gate.stat)
        where = f"in experiment {comparison.b}"
    label = f"{gate.name} {_STAT_TEXT[gate.stat]}"
    if actual is None:
        hint = ""
        if gate.stat in ("mean", "diff") and score.b is not None and score.b.raw_readings:
            hint = f"; {gate.name} holds measurements: gate {gate.name}.raw_mean or .raw_diff"
        return _result(gate, False, f"{label} has no readings {where}{hint}"), score
    return _verdict(gate, label, actual), score


def check_no_regressions(
    comparison: wire.Comparison, *, failures_allowed: bool = False
) -> wire.GateResult:
    """Fails when any paired unit passes in A and fails in B, for any evaluator score; and,
    unless ``failures_allowed`` (a failed gate was given), when a run of B failed whose
    unit ran in A without failing."""
    evaluators = [s for s in comparison.scores if s.kind == "evaluator"]
    parts = []
    for score in evaluators:
        if score.regressions:
            cases = [unit_text(c) for c in score.regressions[:5]]
            parts.append(
                f"{score.name} {len(score.regressions)} ({_few(cases, score.regressions)})"
            )
    total = comparison.regressions
    failed = 0 if failures_allowed else comparison.new_failure_count
    if total == 0:
        message = f"no regressions across {len(evaluators)} evaluator scores"
    else:
        noun = "regression" if total == 1 else "regressions"
        message = f"{total} {noun}: {'; '.join(parts)}"
    if failed:
        shown = [failure_text(f) for f in comparison.new_failures[:5]]
        runs = "run" if failed == 1 else "runs"
        message += (
            f"; {failed} {runs} of experiment {comparison.b} failed where "
            f"experiment {comparison.a} did not ({_few(shown, range(failed))})"
        )
    return wire.GateResult(
        gate="no regressions",
        passed=total == 0 and failed == 0,
        actual=float(total + failed),
        threshold=0.0,
        message=message,
    )


def _few(shown: list[str], every: Sequence[object]) -> str:
    more = f", +{len(every) - len(shown)} more" if len(every) > len(shown) else ""
    return ", ".join(shown) + more


def failure_text(failure: wire.RunFailure) -> str:
    """``case#repetition`` of a failed run, with its run id."""
    return f"{failure.case_id}#{failure.repetition} (run {failure.run_id})"


def unit_text(change: wire.UnitChange) -> str:
    """``case`` or ``case#repetition``."""
    return change.case_id if change.repetition is None else f"{change.case_id}#{change.repetition}"
