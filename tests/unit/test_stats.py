"""Score statistics, each checked against an independent computation: scipy for the
distributions and tests, brute-force enumeration for pass@k and pass^k, plain arithmetic
for means and counts."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from scipy import stats as sp

from evalkit.scoring import stats
from evalkit.scoring.stats import ExperimentReadings, RunKey, ScoreRow, StatsError

# --------------------------------------------------------------------------- helpers


def experiment(
    experiment_id: int,
    values: dict[tuple[str, int], dict[str, float | None]],
    *,
    repetitions: int = 1,
    extra_runs: list[tuple[str, int]] = (),
    kinds: dict[str, str] | None = None,
    skipped: set[tuple[str, int, str]] = frozenset(),
    errored: set[tuple[str, int, str]] = frozenset(),
    raw: dict[tuple[str, int, str], object] | None = None,
    states: dict[tuple[str, int], str] | None = None,
) -> ExperimentReadings:
    """Runs keyed by (case, repetition) with {score name: value} each, in state ``done``
    unless ``states`` says otherwise; run ids are unique across experiments so a mix-up
    would show."""
    runs, rows = [], []
    keys = list(values) + list(extra_runs)
    for index, (case_id, rep) in enumerate(keys):
        run_id = experiment_id * 1000 + index
        state = (states or {}).get((case_id, rep), "done")
        runs.append(RunKey(run_id, case_id, rep, state, f"{state} {case_id}"))
        for name, value in values.get((case_id, rep), {}).items():
            key = (case_id, rep, name)
            rows.append(
                ScoreRow(
                    run_id=run_id,
                    name=name,
                    value=value,
                    kind=(kinds or {}).get(name, "evaluator"),
                    skipped="no tool calls" if key in skipped else None,
                    error="timed out" if key in errored else None,
                    raw=(raw or {}).get(key),
                )
            )
    return ExperimentReadings(experiment_id, 1, repetitions, runs, rows)


def one_score(values: list[float | None], name: str = "acc", **kw) -> ExperimentReadings:
    return experiment(1, {(f"c{i}", 1): {name: v} for i, v in enumerate(values)}, **kw)


def scipy_t_interval(values: list[float]) -> tuple[float, float]:
    low, high = sp.t.interval(
        0.95, len(values) - 1, loc=statistics.fmean(values), scale=sp.sem(values)
    )
    return max(0.0, float(low)), min(1.0, float(high))


def scipy_wilson(k: int, n: int) -> tuple[float, float]:
    ci = sp.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


# --------------------------------------------------------------------------- distributions


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 29, 30, 99, 1000, 10_000])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.025])
def test_t_quantile_matches_scipy(df, p):
    assert stats.t_quantile(p, df) == pytest.approx(sp.t.ppf(p, df), abs=1e-9)


@pytest.mark.parametrize(
    ("k", "n"), [(0, 10), (10, 10), (7, 10), (1, 3), (1, 1), (0, 1), (57, 200)]
)
def test_wilson_matches_scipy(k, n):
    assert stats.wilson_interval(k, n) == pytest.approx(scipy_wilson(k, n), abs=1e-12)


def test_wilson_without_trials_is_none():
    assert stats.wilson_interval(0, 0) is None


@pytest.mark.parametrize(
    "values",
    [[0.2, 0.4, 0.9], [1.0, 0.0, 1.0, 1.0, 0.0, 1.0], [0.5, 0.55], [0.99, 0.98, 1.0, 0.97]],
)
def test_t_interval_matches_scipy_and_is_clipped(values):
    assert stats.t_interval(values) == pytest.approx(scipy_t_interval(values), abs=1e-9)
    low, high = stats.t_interval(values)
    assert 0.0 <= low <= high <= 1.0


def test_t_interval_edge_cases():
    assert stats.t_interval([]) is None
    assert stats.t_interval([0.7]) is None  # one reading: no spread to speak of
    assert stats.t_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    raw = [10.0, 20.0, 60.0]
    assert stats.t_interval(raw, clip=False) == pytest.approx(
        sp.t.interval(0.95, 2, loc=30.0, scale=sp.sem(raw)), abs=1e-9
    )


def test_readings_near_the_float_limit_give_a_mean_and_an_interval():
    """A gauge may read anything finite; squares or sums beyond the float range must not
    break a summary. Checked against the same statistics of the readings scaled down by
    1e300, scaled back up."""
    huge = [1.5e300, 0.5e300, 1.0e300]
    low, high = stats.t_interval(huge, clip=False)
    small_low, small_high = sp.t.interval(0.95, 2, loc=1.0, scale=sp.sem([1.5, 0.5, 1.0]))
    assert low == pytest.approx(small_low * 1e300, rel=1e-9)
    assert high == pytest.approx(small_high * 1e300, rel=1e-9)
    near_max = [1.7e308, 1.7e308, 1.6e308]
    assert stats.mean(near_max) == pytest.approx(1.7e308 / 3 * 2 + 1.6e308 / 3, rel=1e-12)
    assert stats.t_interval(near_max, clip=False) is None  # wider than the float range
    rows = [
        stats.ScoreRow(run_id=n, name="cost", kind="gauge", value=1.0, raw=v)
        for n, v in enumerate(near_max)
    ]
    runs = [stats.RunKey(run_id=n, case_id=f"c{n}", repetition=1) for n in range(3)]
    summary, _ = stats.summarize_name("cost", rows, runs)
    assert summary.raw_readings == 3
    assert summary.raw_mean == pytest.approx(1.7e308 / 3 * 2 + 1.6e308 / 3, rel=1e-12)
    assert summary.raw_mean_ci is None


@pytest.mark.parametrize(
    ("b", "c"),
    [
        *[(0, 0), (1, 0), (0, 5), (3, 10), (10, 3), (7, 7), (25, 40), (200, 260)],
        *[(1700, 1800), (2500, 2500), (4000, 4300)],
    ],
)
def test_mcnemar_exact_matches_the_binomial_test(b, c):
    expected = 1.0 if b + c == 0 else sp.binomtest(b, b + c, 0.5).pvalue
    assert stats.mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_by_hand():
    # 1 regression, 4 improvements: P(X <= 1) = (1 + 5) / 32, doubled.
    assert stats.mcnemar_exact(1, 4) == pytest.approx(2 * 6 / 32)
    assert stats.mcnemar_exact(4, 1) == stats.mcnemar_exact(1, 4)


# --------------------------------------------------------------------------- pass@k


def brute_force(outcomes: list[bool], k: int) -> tuple[float, float]:
    """Over every k-subset of the runs: the share with at least one pass, and all passes."""
    subsets = list(itertools.combinations(outcomes, k))
    return (
        sum(any(s) for s in subsets) / len(subsets),
        sum(all(s) for s in subsets) / len(subsets),
    )


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_and_pass_hat_k_match_enumeration(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            at_k, hat_k = brute_force(outcomes, k)
            assert stats.pass_at_k(n, c, k) == pytest.approx(at_k, abs=1e-12)
            assert stats.pass_hat_k(n, c, k) == pytest.approx(hat_k, abs=1e-12)


def test_pass_at_k_formula_and_limits():
    assert stats.pass_at_k(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))
    assert stats.pass_hat_k(10, 3, 2) == pytest.approx(math.comb(3, 2) / math.comb(10, 2))
    assert stats.pass_at_k(3, 1, 4) is None and stats.pass_hat_k(3, 1, 4) is None
    assert stats.pass_at_k(100, 0, 50) == 0.0 and stats.pass_hat_k(100, 100, 50) == 1.0


def test_default_and_chosen_ks():
    assert stats.resolve_ks(1) == []
    assert stats.resolve_ks(3) == [1, 2, 3]
    assert stats.resolve_ks(7) == [1, 2, 3, 5, 7]
    assert stats.resolve_ks(100) == [1, 2, 3, 5, 10, 20, 50, 100]
    assert stats.resolve_ks(5, [4, 1, 4]) == [1, 4]
    with pytest.raises(StatsError, match=r"from 1 to the experiment's repetitions \(5\); got 6"):
        stats.resolve_ks(5, [6])
    with pytest.raises(StatsError, match="needs repetitions"):
        stats.resolve_ks(1, [1])


# --------------------------------------------------------------------------- bootstrap


def test_paired_bootstrap_is_seeded_and_close_to_scipy():
    import random

    rng = random.Random(7)
    diffs = [rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0]) * rng.random() for _ in range(60)]
    first = stats.paired_bootstrap(diffs, resamples=5000, seed=3)
    assert first == stats.paired_bootstrap(diffs, resamples=5000, seed=3)
    assert first != stats.paired_bootstrap(diffs, resamples=5000, seed=4)
    reference = sp.bootstrap(
        (diffs,),
        statistic=lambda x, axis: x.mean(axis=axis),
        n_resamples=20000,
        method="percentile",
        confidence_level=0.95,
        rng=1,
    ).confidence_interval
    assert first[0] == pytest.approx(reference.low, abs=0.02)
    assert first[1] == pytest.approx(reference.high, abs=0.02)
    assert first[0] < statistics.fmean(diffs) < first[1]


def independent_bootstrap(
    diffs: list[float], resamples: int, seed: int | str
) -> tuple[float, float]:
    """The documented resampling, written out: one (resamples x n) draw of uniforms from
    PCG64 seeded with the SHA-256 of the seed's text, pairs at floor(u * n), each
    resample's mean with fsum, numpy's linear percentiles of the means."""
    import hashlib

    import numpy as np

    digest = hashlib.sha256(str(seed).encode()).digest()
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))
    n = len(diffs)
    uniforms = rng.random((resamples, n))
    means = [math.fsum(diffs[min(math.floor(u * n), n - 1)] for u in row) / n for row in uniforms]
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


@pytest.mark.parametrize("seed", [0, 3, "11:accuracy", "0:latency:raw"])
def test_paired_bootstrap_matches_the_resampling_written_out(seed, monkeypatch):
    import random

    rng = random.Random(5)
    diffs = [rng.choice([-1.0, 0.0, 0.0, 1.0]) * rng.random() for _ in range(37)]
    expected = independent_bootstrap(diffs, 700, seed)
    assert stats.paired_bootstrap(diffs, resamples=700, seed=seed) == pytest.approx(
        expected, abs=1e-12
    )
    # Drawn in blocks of 11 resamples (the last one short): the same draws, the same interval.
    monkeypatch.setattr(stats, "_BLOCK_DRAWS", 11 * 37 + 5)
    assert stats.paired_bootstrap(diffs, resamples=700, seed=seed) == pytest.approx(
        expected, abs=1e-12
    )


def test_paired_bootstrap_edge_cases():
    assert stats.paired_bootstrap([]) is None
    assert stats.paired_bootstrap([0.4]) is None
    assert stats.paired_bootstrap([0.25, 0.25, 0.25]) == (0.25, 0.25)


def test_percentile_interpolates_like_numpy():
    import numpy as np

    values = sorted([0.3, 0.1, 0.9, 0.5, 0.7, 0.2])
    for q in (0.0, 0.025, 0.5, 0.975, 1.0):
        assert stats.percentile(values, q) == pytest.approx(float(np.quantile(values, q)))


# --------------------------------------------------------------------------- summaries


def test_summary_counts_means_rates_and_intervals():
    data = experiment(
        1,
        {
            ("a", 1): {"acc": 1.0, "quality": 0.8, "latency": 0.2},
            ("b", 1): {"acc": 0.0, "quality": 0.3, "latency": 0.4},
            ("c", 1): {"acc": 1.0, "quality": 0.5, "latency": None},
            ("d", 1): {"acc": None, "quality": 0.49, "latency": 0.9},
            ("e", 1): {"acc": None, "quality": None},
        },
        extra_runs=[("f", 1)],  # a run that was never scored (e.g. errored at the harness)
        kinds={"latency": "gauge"},
        skipped={("d", 1, "acc")},
        errored={("e", 1, "acc"), ("c", 1, "latency")},
        raw={("a", 1, "latency"): 1.5, ("b", 1, "latency"): 3.5, ("d", 1, "latency"): "slow"},
    )
    result = stats.summarize(data)
    assert result.runs == 6 and result.ks == [] and result.cases == []
    by = {s.name: s for s in result.scores}
    assert list(by) == ["acc", "latency", "quality"]

    acc = by["acc"]
    assert (acc.readings, acc.skipped, acc.errored, acc.no_value, acc.missing) == (3, 1, 1, 0, 1)
    assert acc.mean == pytest.approx(2 / 3) and acc.binary is True
    assert acc.passes == 2 and acc.pass_rate == pytest.approx(2 / 3)
    assert (acc.pass_rate_ci.low, acc.pass_rate_ci.high) == pytest.approx(scipy_wilson(2, 3))
    assert (acc.mean_ci.low, acc.mean_ci.high) == pytest.approx(scipy_t_interval([1, 0, 1]))

    quality = by["quality"]
    values = [0.8, 0.3, 0.5, 0.49]
    assert (quality.readings, quality.no_value, quality.missing) == (4, 1, 1)
    assert quality.mean == pytest.approx(statistics.fmean(values)) and quality.binary is False
    assert quality.passes == 2  # 0.8 and 0.5 pass; 0.49 and 0.3 do not
    assert (quality.mean_ci.low, quality.mean_ci.high) == pytest.approx(scipy_t_interval(values))

    latency = by["latency"]
    assert latency.kind == "gauge" and latency.pass_rate is None and latency.passes is None
    assert (latency.readings, latency.errored, latency.missing) == (3, 1, 2)
    assert latency.mean == pytest.approx(statistics.fmean([0.2, 0.4, 0.9]))
    assert latency.raw_mean == pytest.approx(2.5) and latency.raw_readings == 2


@pytest.mark.parametrize(("values", "rate"), [([1.0] * 4, 1.0), ([0.0] * 4, 0.0)])
def test_all_pass_and_none_pass(values, rate):
    [summary] = stats.summarize(one_score(values)).scores
    assert summary.pass_rate == rate and summary.mean == rate
    assert (summary.mean_ci.low, summary.mean_ci.high) == (rate, rate)
    assert (summary.pass_rate_ci.low, summary.pass_rate_ci.high) == pytest.approx(
        scipy_wilson(int(rate * 4), 4)
    )
    assert 0 < summary.pass_rate_ci.high - summary.pass_rate_ci.low < 0.55


def test_only_nulls_and_one_run():
    [nulls] = stats.summarize(one_score([None, None])).scores
    assert nulls.readings == 0 and nulls.no_value == 2
    assert nulls.mean is None and nulls.pass_rate is None and nulls.mean_ci is None
    assert nulls.binary is False and nulls.pass_rate_ci is None
    [single] = stats.summarize(one_score([0.75])).scores
    assert single.mean == 0.75 and single.mean_ci is None and single.pass_rate == 1.0
    assert (single.pass_rate_ci.low, single.pass_rate_ci.high) == pytest.approx(scipy_wilson(1, 1))


def test_experiment_without_scores():
    data = experiment(1, {}, extra_runs=[("a", 1), ("b", 1)])
    result = stats.summarize(data)
    assert result.scores == [] and result.runs == 2


def test_repetitions_give_pass_at_k_per_case_and_their_mean():
    outcomes = {"always": [1, 1, 1, 1], "flaky": [1, 0, 0, 1], "never": [0, 0, 0, 0]}
    data = experiment(
        1,
        {
            (case, rep + 1): {"acc": float(v), "lat": 0.5}
            for case, vs in outcomes.items()
            for rep, v in enumerate(vs)
        },
        repetitions=4,
        kinds={"lat": "gauge"},
    )
    result = stats.summarize(data)
    assert result.ks == [1, 2, 3, 4]
    assert [(c.case_id, c.name) for c in result.cases] == [
        ("always", "acc"),
        ("flaky", "acc"),
        ("never", "acc"),
    ]  # gauges have no pass/fail, so no flakiness
    cases = {c.case_id: c for c in result.cases}
    for case_id, vs in outcomes.items():
        for k in result.ks:
            at_k, hat_k = brute_force([bool(v) for v in vs], k)
            assert cases[case_id].pass_at_k[k] == pytest.approx(at_k)
            assert cases[case_id].pass_hat_k[k] == pytest.approx(hat_k)
    assert [c.flaky for c in cases.values()] == [False, True, False]
    [acc] = [s for s in result.scores if s.name == "acc"]
    assert acc.flaky_cases == 1
    for k in result.ks:
        expected = statistics.fmean(cases[c].pass_at_k[k] for c in outcomes)
        assert acc.pass_at_k[k] == pytest.approx(expected)
        assert acc.pass_hat_k[k] == pytest.approx(
            statistics.fmean(cases[c].pass_hat_k[k] for c in outcomes)
        )
    assert acc.pass_at_k[1] == pytest.approx(acc.pass_rate)  # pass@1 is the pass rate


def test_cases_with_fewer_readings_than_k_are_left_out_of_the_mean():
    data = experiment(
        1,
        {("a", 1): {"acc": 1.0}, ("a", 2): {"acc": 0.0}, ("a", 3): {"acc": 1.0}}
        | {("b", 1): {"acc": 0.0}, ("b", 2): {"acc": None}, ("b", 3): {"acc": None}},
        repetitions=3,
    )
    result = stats.summarize(data, ks=[1, 3])
    cases = {c.case_id: c for c in result.cases}
    assert cases["b"].readings == 1 and cases["b"].pass_at_k == {1: 0.0, 3: None}
    [acc] = result.scores
    assert acc.pass_at_k[3] == pytest.approx(1.0)  # only case a has 3 readings
    assert acc.pass_at_k[1] == pytest.approx((2 / 3 + 0.0) / 2)


# --------------------------------------------------------------------------- comparison


def test_compare_pairs_by_case():
    a = experiment(
        1,
        {
            ("q1", 1): {"acc": 1.0, "lat": 0.2},
            ("q2", 1): {"acc": 1.0, "lat": 0.4},
            ("q3", 1): {"acc": 0.0, "lat": 0.6},
            ("q4", 1): {"acc": 0.0, "lat": 0.6},
            ("q5", 1): {"acc": 1.0},
            ("only_a", 1): {"acc": 1.0},
        },
        kinds={"lat": "gauge"},
    )
    b = experiment(
        2,
        {
            ("q1", 1): {"acc": 0.0, "lat": 0.3},  # regression
            ("q2", 1): {"acc": 1.0, "lat": 0.5},
            ("q3", 1): {"acc": 1.0, "lat": 0.5},  # improvement
            ("q4", 1): {"acc": 0.0, "lat": 0.9},
            ("q5", 1): {"acc": None},  # no reading in B: unpaired
            ("only_b", 1): {"acc": 0.0},
        },
        kinds={"lat": "gauge"},
    )
    result = stats.compare(a, b)
    assert result.paired_by == "case"
    assert result.cases_only_a == ["only_a"] and result.cases_only_b == ["only_b"]
    acc, lat = result.scores
    assert (acc.name, lat.name) == ("acc", "lat")
    assert acc.paired == 4 and acc.only_a == 2 and acc.only_b == 1
    assert [(c.case_id, c.a, c.b) for c in acc.regressions] == [("q1", 1.0, 0.0)]
    assert [c.case_id for c in acc.improvements] == ["q3"]
    assert (acc.both_pass, acc.both_fail) == (1, 1)
    assert acc.mean_a == pytest.approx(0.5) and acc.mean_b == pytest.approx(0.5)
    assert acc.mean_diff == pytest.approx(0.0)
    assert acc.mcnemar_p == pytest.approx(sp.binomtest(1, 2, 0.5).pvalue)
    assert acc.a.readings == 6 and acc.b.readings == 5  # summaries use every reading
    assert lat.kind == "gauge" and lat.regressions == [] and lat.mcnemar_p is None
    assert lat.paired == 4
    assert lat.mean_diff == pytest.approx(statistics.fmean([0.1, 0.1, -0.1, 0.3]))
    assert result.regressions == 1 and result.improvements == 1
    assert result.passed is True and result.gates == []


def test_compare_pairs_by_repetition_only_when_both_have_them():
    reps = {("q1", 1): 1.0, ("q1", 2): 0.0, ("q1", 3): 1.0, ("q2", 1): 0.0, ("q2", 2): 0.0}
    a = experiment(1, {key: {"acc": v} for key, v in reps.items()}, repetitions=3)
    flipped = {key: {"acc": 1.0 - v} for key, v in reps.items()}
    b = experiment(2, flipped, repetitions=3)
    by_rep = stats.compare(a, b)
    assert by_rep.paired_by == "case+repetition"
    [acc] = by_rep.scores
    assert acc.paired == 5
    assert [(c.case_id, c.repetition) for c in acc.regressions] == [("q1", 1), ("q1", 3)]
    assert [(c.case_id, c.repetition) for c in acc.improvements] == [
        ("q1", 2),
        ("q2", 1),
        ("q2", 2),
    ]
    assert acc.mcnemar_p == pytest.approx(sp.binomtest(2, 5, 0.5).pvalue)

    # B ran each case once: units are cases, valued by the mean of their readings.
    once = experiment(2, {("q1", 1): {"acc": 0.0}, ("q2", 1): {"acc": 1.0}})
    by_case = stats.compare(a, once)
    assert by_case.paired_by == "case"
    [acc] = by_case.scores
    assert acc.paired == 2
    assert [(c.case_id, c.repetition, c.a) for c in acc.regressions] == [
        ("q1", None, pytest.approx(2 / 3))
    ]
    assert [c.case_id for c in acc.improvements] == ["q2"]
    assert acc.mean_diff == pytest.approx(((0 - 2 / 3) + (1 - 0)) / 2)


def test_compare_mean_difference_interval_is_a_seeded_paired_bootstrap():
    a_values = [0.2, 0.5, 0.9, 0.4, 0.7, 0.1, 0.8, 0.6]
    b_values = [0.3, 0.5, 1.0, 0.6, 0.6, 0.4, 0.9, 0.7]
    a = experiment(1, {(f"c{i}", 1): {"q": v} for i, v in enumerate(a_values)})
    b = experiment(2, {(f"c{i}", 1): {"q": v} for i, v in enumerate(b_values)})
    result = stats.compare(a, b, seed=11, resamples=3000)
    [q] = result.scores
    diffs = [y - x for x, y in zip(a_values, b_values, strict=True)]
    assert q.mean_diff == pytest.approx(statistics.fmean(diffs))
    expected = stats.paired_bootstrap(diffs, resamples=3000, seed="11:q")
    assert (q.mean_diff_ci.low, q.mean_diff_ci.high) == expected
    again = stats.compare(a, b, seed=11, resamples=3000).scores[0].mean_diff_ci
    assert again == q.mean_diff_ci
    assert result.seed == 11 and result.resamples == 3000
    with pytest.raises(StatsError, match="resamples must be from 100"):
        stats.compare(a, b, resamples=10)


def test_compare_names_missing_on_one_side_and_no_common_cases():
    a = experiment(1, {("x", 1): {"old": 1.0}})
    b = experiment(2, {("y", 1): {"new": 0.0}})
    result = stats.compare(a, b)
    new, old = result.scores  # sorted by name
    assert new.both_pass is None and old.both_fail is None
    assert old.b is None and old.paired == 0 and old.mean_diff is None
    assert old.mean_diff_ci is None and old.mcnemar_p is None
    assert new.a is None and new.b.mean == 0.0
    assert result.cases_only_a == ["x"] and result.cases_only_b == ["y"]


def test_compare_experiment_with_itself():
    a = one_score([1.0, 0.0, 1.0, 0.5])
    [acc] = stats.compare(a, a).scores
    assert acc.paired == 4 and acc.mean_diff == 0.0 and acc.regressions == []
    assert (acc.mean_diff_ci.low, acc.mean_diff_ci.high) == (0.0, 0.0)
    assert acc.mcnemar_p == 1.0


# --------------------------------------------------------------------------- gates


@pytest.mark.parametrize(
    ("text", "name", "stat", "op", "threshold"),
    [
        ("accuracy>=0.8", "accuracy", "mean", ">=", 0.8),
        ("  accuracy >= 0.8 ", "accuracy", "mean", ">=", 0.8),
        ("accuracy.mean>0.5", "accuracy", "mean", ">", 0.5),
        ("judge.pass_rate<=1", "judge", "pass_rate", "<=", 1.0),
        ("custom.helpful.pass_rate==0.25", "custom.helpful", "pass_rate", "==", 0.25),
        ("latency.raw_mean<30", "latency", "raw_mean", "<", 30.0),
        ("accuracy.diff>=-0.05", "accuracy", "diff", ">=", -0.05),
    ],
)
def test_parse_gate(text, name, stat, op, threshold):
    gate = stats.parse_gate(text)
    assert (gate.name, gate.stat, gate.operator, gate.threshold) == (name, stat, op, threshold)
    assert gate.text == text.strip()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accuracy", "has no comparison"),
        ("", "has no comparison"),
        (">=0.8", "names no score"),
        (".pass_rate>=0.8", "names no score"),
        ("accuracy=0.8", "did you mean ==?"),
        ("accuracy=>0.8", "did you mean >=?"),
        ("accuracy!=0.8", "'!=' is not a gate operator"),
        ("accuracy>=high", "'high' is not a number"),
        ("accuracy>=", "'nothing' is not a number"),
        ("accuracy>=80", "scores are fractions (0.8, not 80)"),
        ("accuracy>=80%", "write rates as fractions"),
        ("accuracy.pass_rate>=-0.1", "lies from 0 to 1"),
        ("accuracy.diff>=2", "lies from -1 to 1"),
        ("accuracy>=nan", "finite number"),
        ("0.5<=accuracy<=0.9", "more than one comparison"),
    ],
)
def test_bad_gates_say_what_is_wrong(text, message):
    with pytest.raises(StatsError, match=re_escape(message)):
        stats.parse_gate(text)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def gated(*gates: str, no_regressions: bool = False):
    a = experiment(
        1,
        {
            ("q1", 1): {"acc": 1.0, "lat": 0.1},
            ("q2", 1): {"acc": 1.0, "lat": 0.1},
            ("q3", 1): {"acc": 0.0, "lat": 0.1},
            ("q4", 1): {"acc": 1.0, "lat": 0.1},
        },
        kinds={"lat": "gauge"},
        raw={(f"q{i}", 1, "lat"): 10.0 for i in range(1, 5)},
    )
    b = experiment(
        2,
        {
            ("q1", 1): {"acc": 0.0, "lat": 0.3},
            ("q2", 1): {"acc": 1.0, "lat": 0.3},
            ("q3", 1): {"acc": 1.0, "lat": 0.3},
            ("q4", 1): {"acc": 0.0, "lat": None},
        },
        kinds={"lat": "gauge"},
        raw={("q1", 1, "lat"): 20.0, ("q2", 1, "lat"): 40.0, ("q3", 1, "lat"): 30.0},
    )
    return stats.compare(
        a, b, gates=[stats.parse_gate(g) for g in gates], no_regressions=no_regressions
    )


def test_gates_on_the_new_experiment():
    result = gated("acc>=0.5", "acc.pass_rate>0.8", "lat.raw_mean<=25", "acc.diff>=-0.1", "lat<0.5")
    assert [g.passed for g in result.gates] == [True, False, False, False, True]
    assert result.passed is False
    ok, rate, raw, diff, _ = result.gates
    assert ok.message == "acc mean 0.5 >= 0.5" and ok.actual == 0.5
    assert rate.message == "acc pass rate 0.5 is not > 0.8 (short by 0.3)"
    assert raw.message == "lat mean measurement 30 is not <= 25 (over by 5)"
    assert raw.actual == pytest.approx(30.0)
    assert diff.actual == pytest.approx(-0.25)
    assert diff.message == "acc mean difference (B - A) -0.25 is not >= -0.1 (short by 0.15)"


def test_gate_refusals_are_failures_with_reasons():
    result = gated("accuracy>=0.5", "lat.pass_rate>=0.5", "acc==0.6", "acc>0.5")
    messages = [g.message for g in result.gates]
    assert messages[0] == "experiment 2 has no score named 'accuracy' (its scores are acc, lat)"
    assert messages[1].startswith("lat is a gauge: it measures and has no pass rate")
    assert messages[2] == "acc mean 0.5 is not == 0.6 (off by 0.1)"
    assert messages[3] == "acc mean 0.5 is not > 0.5 (equal to it, and the gate needs more)"
    assert not any(g.passed for g in result.gates)


def test_no_regressions_gate():
    failed = gated(no_regressions=True)
    [gate] = failed.gates
    assert gate.gate == "no regressions" and gate.passed is False
    assert gate.message == "2 regressions: acc 2 (q1, q4)" and gate.actual == 2.0
    a = one_score([1.0, 0.0])
    passed = stats.compare(a, a, no_regressions=True)
    assert passed.passed is True
    assert passed.gates[0].message == "no regressions across 1 evaluator scores"


def test_gate_on_a_score_with_no_readings_fails():
    a = one_score([1.0])
    b = one_score([None])
    [gate] = stats.compare(a, b, gates=[stats.parse_gate("acc>=0.1")]).gates
    assert gate.passed is False and gate.message == "acc mean has no readings in experiment 1"


def test_gauges_that_give_only_a_measurement():
    """Built-in gauges store value None and the measurement in raw."""
    seconds_a = {"q1": 2.0, "q2": 4.0, "q3": 9.0}
    seconds_b = {"q1": 3.0, "q2": 4.5, "q3": None}
    a = experiment(
        1,
        {(c, 1): {"latency": None, "acc": 1.0} for c in seconds_a},
        kinds={"latency": "gauge"},
        raw={(c, 1, "latency"): v for c, v in seconds_a.items()},
    )
    b = experiment(
        2,
        {(c, 1): {"latency": None, "acc": 1.0} for c in seconds_b},
        kinds={"latency": "gauge"},
        raw={(c, 1, "latency"): v for c, v in seconds_b.items() if v is not None},
        errored={("q3", 1, "latency")},
    )
    [_, latency] = stats.summarize(a).scores
    assert (latency.readings, latency.values, latency.no_value) == (3, 0, 0)
    assert latency.mean is None and latency.raw_mean == pytest.approx(5.0)
    expected = sp.t.interval(0.95, 2, loc=5.0, scale=sp.sem([2.0, 4.0, 9.0]))
    assert (latency.raw_mean_ci.low, latency.raw_mean_ci.high) == pytest.approx(expected)

    result = stats.compare(
        a,
        b,
        gates=[
            stats.parse_gate(g)
            for g in ("latency.raw_mean<=4", "latency.raw_diff<=0.5", "latency<=0.5")
        ],
    )
    [_, lat] = result.scores
    assert lat.b.errored == 1 and lat.b.readings == 2
    assert lat.paired == 0 and lat.mean_diff is None  # no values on either side
    assert lat.raw_paired == 2 and lat.raw_diff == pytest.approx((1.0 + 0.5) / 2)
    assert lat.raw_diff_ci == stats.compare(a, b).scores[1].raw_diff_ci
    raw_mean, raw_diff, mean_gate = result.gates
    assert raw_mean.passed and raw_mean.actual == pytest.approx(3.75)
    assert (
        raw_diff.message
        == "latency measurement difference (B - A) 0.75 is not <= 0.5 (over by 0.25)"
    )
    assert mean_gate.message == (
        "latency mean has no readings in experiment 2; "
        "latency holds measurements: gate latency.raw_mean or .raw_diff"
    )


# --------------------------------------------------------------------------- failed runs


def crashing(experiment_id: int = 2, *, failed: tuple[str, ...] = ("q3", "q4")):
    """Four cases; those in ``failed`` ended ``failed`` with the 0 an older round gave them
    (the rule goes by the run's state, whatever the rows hold), q5 errored (no rows)."""
    values = {(f"q{i}", 1): {"acc": 1.0 if f"q{i}" not in failed else 0.0} for i in range(1, 5)}
    return experiment(
        experiment_id,
        values,
        extra_runs=[("q5", 1)],
        states={**{(c, 1): "failed" for c in failed}, ("q5", 1): "errored"},
    )


def test_failed_runs_are_counted_apart_and_never_averaged():
    summary = stats.summarize(crashing())
    assert (summary.runs, summary.failed, summary.errored) == (5, 2, 1)
    assert [(f.case_id, f.state, f.error) for f in summary.failures] == [
        ("q3", "failed", "failed q3"),
        ("q4", "failed", "failed q4"),
        ("q5", "errored", "errored q5"),
    ]
    [acc] = summary.scores
    assert (acc.readings, acc.failed, acc.missing, acc.skipped) == (2, 2, 1, 0)
    assert acc.mean == 1.0 and acc.pass_rate == 1.0  # not dragged down by the crashes
    assert acc.pass_rate_all == 0.5  # of all judged-or-failed runs: a crash is not a pass
    low, high = stats.wilson_interval(2, 4)
    assert acc.pass_rate_all_ci is not None
    assert (acc.pass_rate_all_ci.low, acc.pass_rate_all_ci.high) == (low, high)
    counted = acc.readings + acc.skipped + acc.errored + acc.no_value + acc.failed + acc.missing
    assert counted == acc.runs


def test_a_run_failed_skip_is_failed_not_skipped():
    data = crashing(failed=())
    data.runs[0] = RunKey(data.runs[0].run_id, "q1", 1, "failed")
    data.rows[0] = ScoreRow(data.rows[0].run_id, "acc", None, skipped="the run failed, ...")
    [acc] = stats.summarize(data).scores
    assert (acc.failed, acc.skipped, acc.readings) == (1, 0, 3)
    assert acc.pass_rate == 1.0 and acc.pass_rate_all == 0.75


def test_no_failed_runs_no_change():
    [acc] = stats.summarize(one_score([1.0, 0.0])).scores
    assert acc.failed == 0 and acc.pass_rate_all == acc.pass_rate == 0.5


def test_compare_shows_failed_runs_per_side_and_new_failures():
    a = crashing(1, failed=("q4",))
    b = crashing(2, failed=("q3", "q4"))
    result = stats.compare(a, b)
    assert (result.runs_a, result.failed_a, result.errored_a) == (5, 1, 1)
    assert (result.runs_b, result.failed_b, result.errored_b) == (5, 2, 1)
    assert result.failed_rose is True
    # q3 answered (and passed) in A and failed in B: a new failure, not a regression.
    assert [f.case_id for f in result.new_failures] == ["q3"] and result.new_failure_count == 1
    [acc] = result.scores
    assert acc.regressions == [] and acc.paired == 2 and acc.only_a == 1
    assert acc.mean_diff == 0.0
    assert stats.compare(b, a).failed_rose is False


def test_gates_on_failed_and_errored_runs():
    result = stats.compare(
        crashing(1, failed=()),
        crashing(2),
        gates=[
            stats.parse_gate(g)
            for g in (
                "failed<=0",
                "failed<=2",
                "failed_rate<=0.3",
                "errored==1",
                "errored_rate<0.1",
            )
        ],
    )
    assert [g.passed for g in result.gates] == [False, True, False, True, False]
    assert result.gates[0].message == "failed runs of experiment 2: 2 is not <= 0 (over by 2)"
    assert result.gates[2].actual == pytest.approx(0.4)
    assert "(2 of 5)" in result.gates[2].message


def test_a_score_gate_fails_while_runs_failed_unless_a_failed_gate_allows_them():
    a, b = crashing(1, failed=()), crashing(2)
    [alone] = stats.compare(a, b, gates=[stats.parse_gate("acc.pass_rate>=0.9")]).gates
    assert alone.passed is False and alone.actual == 1.0
    assert alone.message.startswith("acc pass rate 1 >= 0.9; but 2 runs of experiment 2 failed")
    assert "failed<=N" in alone.message and "acc.pass_rate_all" in alone.message
    allowed = stats.compare(
        a, b, gates=[stats.parse_gate(g) for g in ("acc.pass_rate>=0.9", "failed<=2")]
    )
    assert [g.passed for g in allowed.gates] == [True, True] and allowed.passed
    [of_all] = stats.compare(a, b, gates=[stats.parse_gate("acc.pass_rate_all>=0.9")]).gates
    assert of_all.passed is False and of_all.actual == 0.5
    assert of_all.message.startswith("acc pass rate of all runs (failed runs as not passing) 0.5")
    assert "failed and were not judged" not in of_all.message
    [fine] = stats.compare(a, a, gates=[stats.parse_gate("acc.pass_rate>=0.9")]).gates
    assert fine.passed and fine.message == "acc pass rate 1 >= 0.9"


def test_no_regressions_counts_new_failures_unless_a_failed_gate_is_given():
    a, b = crashing(1, failed=()), crashing(2)
    [gate] = stats.compare(a, b, no_regressions=True).gates
    assert gate.passed is False and gate.actual == 2.0
    assert gate.message == (
        "no regressions across 1 evaluator scores; 2 runs of experiment 2 failed where "
        "experiment 1 did not (q3#1 (run 2002), q4#1 (run 2003))"
    )
    allowed = stats.compare(a, b, gates=[stats.parse_gate("failed_rate<=0.5")], no_regressions=True)
    assert allowed.passed is True


def test_run_gates_parse():
    gate = stats.parse_gate(" failed_rate <= 0.05 ")
    assert (gate.name, gate.stat, gate.threshold, gate.on_runs) == ("", "failed_rate", 0.05, True)
    assert stats.parse_gate("failed.mean>=0.5").name == "failed"  # a score named failed
    assert stats.parse_gate("acc.pass_rate_all>=0.5").stat == "pass_rate_all"
    with pytest.raises(StatsError, match="never below 0"):
        stats.parse_gate("failed<=-1")
    with pytest.raises(StatsError, match=r"lies from 0 to 1.*rates as fractions"):
        stats.parse_gate("failed_rate<=5")
