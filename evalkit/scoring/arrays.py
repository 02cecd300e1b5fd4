"""The statistics' passes over an experiment's scores held as numpy arrays.

``stats.summarize`` and ``stats.compare`` do their per-row work here: a score name's rows
are columns (:class:`ScoreColumns`, one entry per row), an experiment's runs are looked up
by id (:class:`RunIndex`), and a comparison's units are numbered once for both experiments
(:class:`Units`). Every number is the one the row-by-row definitions in ``stats`` give,
bit for bit: sums that must be exact stay ``math.fsum`` over the values, in Python; only
the bookkeeping (which row is a reading, which run failed, which unit a run is, which
units pair) is vectorised. For two 10,000-run experiments that bookkeeping was most of a
comparison's time besides the bootstrap.

numpy is imported at the top: the server imports this module, and ``stats`` imports it
only when it first summarizes or compares, so the CLI's start never pays for numpy."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from evalkit.model import stats as wire
from evalkit.scoring import stats

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ScoreColumns:
    """One score name's rows of one experiment, one entry per row, in the same order in
    every column. NaN marks "none" in the float columns (a value lies in [0, 1] and a
    measurement is finite, so NaN is never a number read)."""

    run_ids: Ints
    readings: Floats
    """The row's value when it was not skipped (``ScoreRow.reading``)."""
    measurements: Floats
    """A gauge reading's finite number (``ScoreRow.measurement``)."""
    gauge: Bools
    skipped: Bools
    errored: Bools
    """The row carries an error text."""

    def __len__(self) -> int:
        return len(self.run_ids)

    @classmethod
    def from_rows(cls, rows: Sequence[stats.ScoreRow]) -> ScoreColumns:
        return cls(
            run_ids=np.array([r.run_id for r in rows], dtype=np.int64),
            readings=_floats([r.reading for r in rows]),
            measurements=_floats([r.measurement for r in rows]),
            gauge=np.array([r.kind == "gauge" for r in rows], dtype=np.bool_),
            skipped=np.array([r.skipped is not None for r in rows], dtype=np.bool_),
            errored=np.array([bool(r.error) for r in rows], dtype=np.bool_),
        )

    @classmethod
    def from_database(
        cls,
        run_ids: Sequence[int],
        values: Sequence[float | None],
        gauge: Sequence[bool],
        skipped: Sequence[bool],
        errored: Sequence[bool],
        raws: Sequence[str | None],
    ) -> ScoreColumns:
        """From ``score_columns_for_experiment``'s arrays; ``raws`` is a gauge's JSON number
        as text (None elsewhere), read as a measurement where it is a finite float and the
        row was not skipped, as ``ScoreRow`` reads it."""
        is_gauge = np.array(gauge, dtype=np.bool_)
        was_skipped = np.array(skipped, dtype=np.bool_)
        numbers = _floats([None if raw is None else float(raw) for raw in raws])
        measured = is_gauge & ~was_skipped & np.isfinite(numbers)
        return cls(
            run_ids=np.array(run_ids, dtype=np.int64),
            readings=np.where(was_skipped, np.nan, _floats(values)),
            measurements=np.where(measured, numbers, np.nan),
            gauge=is_gauge,
            skipped=was_skipped,
            errored=np.array(errored, dtype=np.bool_),
        )

    def is_reading(self) -> Bools:
        return ~np.isnan(self.readings) | ~np.isnan(self.measurements)

    def where(self, keep: Bools) -> ScoreColumns:
        return ScoreColumns(
            run_ids=self.run_ids[keep],
            readings=self.readings[keep],
            measurements=self.measurements[keep],
            gauge=self.gauge[keep],
            skipped=self.skipped[keep],
            errored=self.errored[keep],
        )


def _floats(values: Sequence[float | None]) -> Floats:
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


EMPTY = ScoreColumns.from_rows([])


def columns_by_name(rows: Sequence[stats.ScoreRow]) -> dict[str, ScoreColumns]:
    """Rows grouped by score name (sorted), as columns."""
    grouped: dict[str, list[stats.ScoreRow]] = defaultdict(list)
    for row in rows:
        grouped[row.name].append(row)
    return {name: ScoreColumns.from_rows(grouped[name]) for name in sorted(grouped)}


class RunIndex:
    """An experiment's runs by id: their count, which failed, and where each row's run is."""

    def __init__(self, runs: Sequence[stats.RunKey]) -> None:
        self.runs = runs
        self.ids = np.array([run.run_id for run in runs], dtype=np.int64)
        self.failed_ids = np.array(
            [run.run_id for run in runs if run.state == stats.FAILED], dtype=np.int64
        )
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._order]

    def positions(self, run_ids: Ints) -> Ints:
        """Each id's run's index in ``runs``; -1 for an id that is not one of them."""
        if not len(self._sorted):
            return np.full(len(run_ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._sorted, run_ids), len(self._sorted) - 1)
        return np.where(self._sorted[at] == run_ids, self._order[at], -1)

    def of_failed(self, run_ids: Ints) -> Bools:
        return np.isin(run_ids, self.failed_ids)


# --------------------------------------------------------------------------- summaries


def kind_of(*sides: ScoreColumns) -> Literal["evaluator", "gauge"]:
    """A name is a gauge when every row of it is one."""
    rows = sum(len(side) for side in sides)
    return "gauge" if rows and all(side.gauge.all() for side in sides) else "evaluator"


def summarize_name(
    name: str,
    columns: ScoreColumns,
    index: RunIndex,
    *,
    ks: Sequence[int] = (),
    confidence: float = stats.CONFIDENCE,
) -> tuple[wire.ScoreSummary, list[wire.CaseFlakiness]]:
    """``stats.summarize_name`` over columns."""
    kind = kind_of(columns)
    missing = int(np.count_nonzero(~np.isin(index.ids, columns.run_ids)))
    of_failed = index.of_failed(columns.run_ids)
    failed = int(np.count_nonzero(of_failed))
    rows = columns.where(~of_failed) if failed else columns
    has_value = ~np.isnan(rows.readings)
    value_array = rows.readings[has_value]
    values = value_array.tolist()
    is_reading = has_value | ~np.isnan(rows.measurements)
    unread = ~rows.skipped & ~is_reading
    summary = wire.ScoreSummary(
        name=name,
        kind=kind,
        runs=len(index.runs),
        failed=failed,
        readings=int(np.count_nonzero(is_reading)),
        skipped=int(np.count_nonzero(rows.skipped)),
        errored=int(np.count_nonzero(unread & rows.errored)),
        no_value=int(np.count_nonzero(unread & ~rows.errored)),
        missing=missing,
        values=len(values),
        mean=stats.mean(values),
        mean_ci=_interval(stats.t_interval(values, confidence)),
        binary=bool(values) and bool(np.all((value_array == 0.0) | (value_array == 1.0))),
    )
    raws = rows.measurements[~np.isnan(rows.measurements)].tolist()
    if raws:
        summary.raw_mean = stats.mean(raws)
        summary.raw_mean_ci = _interval(stats.t_interval(raws, confidence, clip=False))
        summary.raw_readings = len(raws)
    if kind == "gauge":
        return summary, []
    passed = int(np.count_nonzero(value_array >= stats.PASS_THRESHOLD))
    summary.passes = passed
    summary.pass_rate = passed / len(values) if values else None
    summary.pass_rate_ci = _interval(stats.wilson_interval(passed, len(values), confidence))
    judged = len(values) + failed
    summary.pass_rate_all = passed / judged if judged else None
    summary.pass_rate_all_ci = _interval(stats.wilson_interval(passed, judged, confidence))
    if not ks:
        return summary, []
    cases = _flakiness(name, rows, has_value, index, ks)
    summary.pass_at_k = _mean_over_cases(cases, "pass_at_k", ks)
    summary.pass_hat_k = _mean_over_cases(cases, "pass_hat_k", ks)
    summary.flaky_cases = sum(1 for case in cases if case.flaky)
    return summary, cases


def _flakiness(
    name: str, rows: ScoreColumns, has_value: Bools, index: RunIndex, ks: Sequence[int]
) -> list[wire.CaseFlakiness]:
    """pass@k and pass^k of each case with a reading."""
    at = index.positions(rows.run_ids)
    read = has_value & (at >= 0)
    per_case: dict[str, list[bool]] = defaultdict(list)
    outcomes = (rows.readings[read] >= stats.PASS_THRESHOLD).tolist()
    for position, passed in zip(at[read].tolist(), outcomes, strict=True):
        per_case[index.runs[position].case_id].append(passed)
    cases = []
    for case_id, found in sorted(per_case.items()):
        n, c = len(found), sum(found)
        cases.append(
            wire.CaseFlakiness(
                case_id=case_id,
                name=name,
                readings=n,
                passes=c,
                pass_at_k={k: stats.pass_at_k(n, c, k) for k in ks},
                pass_hat_k={k: stats.pass_hat_k(n, c, k) for k in ks},
                flaky=0 < c < n,
            )
        )
    return cases


def _mean_over_cases(
    cases: Sequence[wire.CaseFlakiness], attribute: str, ks: Sequence[int]
) -> dict[int, float]:
    result = {}
    for k in ks:
        found = [v for case in cases if (v := getattr(case, attribute)[k]) is not None]
        if found:
            result[k] = math.fsum(found) / len(found)
    return result


def _interval(pair: tuple[float, float] | None) -> wire.Interval | None:
    return None if pair is None else wire.Interval(low=pair[0], high=pair[1])


# --------------------------------------------------------------------------- comparison


class Units:
    """The units of a comparison (a case, or a case and a repetition), numbered in sorted
    order over both experiments, so that numbers sort as the units do; and the unit of
    each run of A and of B by its index (-1 for a failed run: it is never paired)."""

    def __init__(
        self, a: Sequence[stats.RunKey], b: Sequence[stats.RunKey], by_repetition: bool
    ) -> None:
        def unit(run: stats.RunKey) -> stats.Unit:
            return run.case_id, run.repetition if by_repetition else None

        self.keys: list[stats.Unit] = sorted(
            {unit(run) for run in (*a, *b) if run.state != stats.FAILED}
        )
        number = {key: i for i, key in enumerate(self.keys)}

        def numbered(runs: Sequence[stats.RunKey]) -> Ints:
            return np.array(
                [-1 if run.state == stats.FAILED else number[unit(run)] for run in runs],
                dtype=np.int64,
            )

        self.of_a, self.of_b = numbered(a), numbered(b)


@dataclass(frozen=True)
class Side:
    """One experiment of a comparison: its runs and each run's unit."""

    data: stats.ExperimentReadings
    index: RunIndex
    unit_of_run: Ints


def unit_values(side: Side, rows: ScoreColumns, column: Floats, units: int) -> tuple[Floats, Bools]:
    """(the mean of each unit's numbers in ``column``, which units have one): a unit's
    value is ``stats._mean`` of its readings, a single reading itself."""
    at = side.index.positions(rows.run_ids)
    unit = np.where(at >= 0, side.unit_of_run[at], -1) if len(side.unit_of_run) else at
    keep = (unit >= 0) & ~np.isnan(column)
    unit, found = unit[keep], column[keep]
    counts = np.bincount(unit, minlength=units)
    values = np.full(units, np.nan)
    values[unit] = found
    # A single reading is its own mean, except -0.0: stats._mean gives what fsum does.
    negative_zero = (values == 0) & np.signbit(values)
    if negative_zero.any():
        values[negative_zero] = stats._mean([-0.0])
    several = np.flatnonzero(counts > 1)
    if len(several):
        order = np.argsort(unit, kind="stable")
        ordered = found[order].tolist()
        starts = np.searchsorted(unit[order], several).tolist()
        for u, start, count in zip(several.tolist(), starts, counts[several].tolist(), strict=True):
            values[u] = stats._mean(ordered[start : start + count])
    return values, counts > 0


@dataclass(frozen=True)
class Paired:
    """The paired units of one score name and what they read on each side."""

    units: Ints
    a: Floats
    b: Floats
    only_a: int
    only_b: int

    @classmethod
    def of(cls, a: tuple[Floats, Bools], b: tuple[Floats, Bools]) -> Paired:
        (values_a, has_a), (values_b, has_b) = a, b
        units = np.flatnonzero(has_a & has_b)
        return cls(
            units=units,
            a=values_a[units],
            b=values_b[units],
            only_a=int(np.count_nonzero(has_a & ~has_b)),
            only_b=int(np.count_nonzero(has_b & ~has_a)),
        )

    def differences(self) -> list[float]:
        return (self.b - self.a).tolist()


def compare_name(
    name: str,
    side_a: Side,
    side_b: Side,
    rows_a: ScoreColumns,
    rows_b: ScoreColumns,
    units: Units,
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> wire.ScoreComparison:
    """``stats``' comparison of one score name over columns."""
    kind = kind_of(rows_a, rows_b)
    summary_a = summary_b = None
    if len(rows_a):
        summary_a = summarize_name(name, rows_a, side_a.index, confidence=confidence)[0]
    if len(rows_b):
        summary_b = summarize_name(name, rows_b, side_b.index, confidence=confidence)[0]
    count = len(units.keys)
    paired = Paired.of(
        unit_values(side_a, rows_a, rows_a.readings, count),
        unit_values(side_b, rows_b, rows_b.readings, count),
    )
    differences = paired.differences()
    result = wire.ScoreComparison(
        name=name,
        kind=kind,
        a=summary_a,
        b=summary_b,
        paired=len(paired.units),
        only_a=paired.only_a,
        only_b=paired.only_b,
        mean_a=stats.mean(paired.a.tolist()),
        mean_b=stats.mean(paired.b.tolist()),
        mean_diff=stats.mean(differences),
        mean_diff_ci=_interval(
            stats.paired_bootstrap(
                differences, resamples=resamples, seed=f"{seed}:{name}", confidence=confidence
            )
        ),
        regressions=[],
        improvements=[],
        both_pass=None,
        both_fail=None,
        mcnemar_p=None,
    )
    if kind == "gauge":
        raw = Paired.of(
            unit_values(side_a, rows_a, rows_a.measurements, count),
            unit_values(side_b, rows_b, rows_b.measurements, count),
        )
        if len(raw.units):
            raw_differences = raw.differences()
            result.raw_paired = len(raw.units)
            result.raw_diff = stats.mean(raw_differences)
            result.raw_diff_ci = _interval(
                stats.paired_bootstrap(
                    raw_differences,
                    resamples=resamples,
                    seed=f"{seed}:{name}:raw",
                    confidence=confidence,
                )
            )
        return result
    if len(paired.units):
        _changes(result, paired, units)
    return result


def _changes(result: wire.ScoreComparison, paired: Paired, units: Units) -> None:
    """Regressions and improvements (in unit order), both-pass and both-fail counts and
    McNemar's test of a score name's paired units."""
    passes_a = paired.a >= stats.PASS_THRESHOLD
    passes_b = paired.b >= stats.PASS_THRESHOLD

    def changes(where: Bools) -> list[wire.UnitChange]:
        found = []
        for u, a, b in zip(
            paired.units[where].tolist(),
            paired.a[where].tolist(),
            paired.b[where].tolist(),
            strict=True,
        ):
            case_id, repetition = units.keys[u]
            found.append(wire.UnitChange(case_id=case_id, repetition=repetition, a=a, b=b))
        return found

    result.regressions = changes(passes_a & ~passes_b)
    result.improvements = changes(passes_b & ~passes_a)
    result.both_pass = int(np.count_nonzero(passes_a & passes_b))
    result.both_fail = int(np.count_nonzero(~passes_a & ~passes_b))
    result.mcnemar_p = stats.mcnemar_exact(len(result.regressions), len(result.improvements))
