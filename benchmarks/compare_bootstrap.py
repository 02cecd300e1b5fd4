"""The comparison's statistics on two 10,000-run experiments, before and after the paired
bootstrap was vectorised with numpy, timed side by side in one process.

    uv run python benchmarks/compare_bootstrap.py [--runs 10000] [--rounds 3] [--before REV]
        [--random-pairs N]

"Before" is ``evalkit/scoring/stats.py`` at REV (default cf5908b, the last commit with the
pure-Python bootstrap: ``random.Random`` draws, one ``fsum`` per resample), loaded from git;
"after" is the working tree's. ``--before 22a5fd3`` is the last commit before the passes over
the rows became numpy columns (``evalkit/scoring/arrays.py``): from there on the draws are
the same, and the script says whether both gave the same comparison, byte for byte. Each
round times ``stats.compare`` (every score name: the summaries, the bootstrap intervals,
regressions and McNemar) for both, alternating, and the medians are printed with their
ratio. The experiments hold three score names per run: a
pass/fail check, a judge's graded value and a latency gauge (a bootstrap each: the values of
the first two, the gauge's measurements)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import msgspec

from evalkit.scoring import stats as after

ROOT = Path(__file__).resolve().parents[1]


def load_before(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{rev}:evalkit/scoring/stats.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "stats_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("stats_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["stats_before"] = module
    spec.loader.exec_module(module)
    return module


def experiment(module: ModuleType, experiment_id: int, runs: int, shift: float, seed: int):
    rng = random.Random(seed)
    keys, rows = [], []
    for i in range(runs):
        run_id = experiment_id * 1_000_000 + i
        keys.append(module.RunKey(run_id, f"case-{i:05d}", 1))
        rows.append(module.ScoreRow(run_id, "exact_match", float(rng.random() < 0.7 + shift)))
        judged = min(1.0, max(0.0, rng.gauss(0.65 + shift, 0.2)))
        rows.append(module.ScoreRow(run_id, "judge", judged))
        seconds = rng.lognormvariate(1.0, 0.5)
        rows.append(module.ScoreRow(run_id, "latency", None, kind="gauge", raw=seconds))
    return module.ExperimentReadings(experiment_id, 1, 1, keys, rows)


def random_rows(draw: random.Random, experiment_id: int, repetitions: int, cases: int):
    """Runs and score rows of every shape the statistics tell apart: failed and errored
    runs, skipped, errored and valueless rows, mixed kinds, gauges measuring numbers,
    booleans, text, -0.0, huge and infinite values, cases with no run, a row of no run."""
    runs, rows = [], []
    run_id = experiment_id * 100_000
    names = draw.sample(["acc", "judge", "lat", "cost", "mixed", "steps"], draw.randint(0, 5))
    for case in range(cases):
        if draw.random() < 0.1:
            continue
        for repetition in range(1, repetitions + 1):
            run_id += 1
            state = draw.choices(["done", "failed", "errored"], [0.85, 0.1, 0.05])[0]
            why = f"why {run_id}" if state != "done" else None
            runs.append((run_id, f"case-{case:03d}", repetition, state, why))
            if state == "errored":
                continue
            for name in names:
                if draw.random() < 0.05:
                    continue
                gauge = name in ("lat", "cost", "steps") or (
                    name == "mixed" and draw.random() < 0.5
                )
                skipped = "no tools" if draw.random() < 0.05 else None
                error = draw.choice(["", "boom"]) if draw.random() < 0.05 else None
                value = raw = None
                if not gauge:
                    value = (
                        float(draw.random() < 0.7)
                        if name == "acc"
                        else draw.choice([0.0, 1.0, None, draw.random(), 0.5])
                    )
                else:
                    odd = [draw.lognormvariate(0, 1), 2, True, "x", None, 1e300, -0.0, math.inf]
                    raw = 2 if name == "steps" else draw.choice(odd)
                    value = draw.random() if draw.random() < 0.1 else None
                kind = "gauge" if gauge else "evaluator"
                rows.append((run_id, name, value, kind, skipped, error, raw))
    if draw.random() < 0.2:
        rows.append((999_999_999, "acc", 1.0, "evaluator", None, None, None))
    return runs, rows


def same_on_random_pairs(before: ModuleType, pairs: int) -> int:
    """Compare and summarize random pairs with both modules; the pairs that differ."""
    draw = random.Random(0)
    differing = 0
    for _ in range(pairs):
        reps_a, reps_b = draw.choice([1, 1, 3]), draw.choice([1, 3, 3])
        rows_a = random_rows(draw, 1, reps_a, draw.randint(0, 40))
        rows_b = random_rows(draw, 2, reps_b, draw.randint(0, 40))
        texts = ["acc>=0.5", "lat.raw_diff<=1", "failed<=1", "judge.pass_rate_all>=0.3"]
        gates = [text for text in texts if draw.random() < 0.5]
        no_regressions, seed = draw.random() < 0.5, draw.randint(0, 5)
        answers = []
        for module in (before, after):

            def readings(experiment_id, repetitions, data, module=module):
                runs, rows = data
                return module.ExperimentReadings(
                    experiment_id,
                    1,
                    repetitions,
                    [module.RunKey(*run) for run in runs],
                    [module.ScoreRow(*row) for row in rows],
                )

            a, b = readings(1, reps_a, rows_a), readings(2, reps_b, rows_b)
            comparison = module.compare(
                a,
                b,
                gates=[module.parse_gate(text) for text in gates],
                no_regressions=no_regressions,
                seed=seed,
                resamples=200,
            )
            answers.append(
                [
                    msgspec.json.encode(x)
                    for x in (comparison, module.summarize(a), module.summarize(b))
                ]
            )
        differing += answers[0] != answers[1]
    return differing


def timed(module: ModuleType, runs: int) -> tuple[float, object]:
    a = experiment(module, 1, runs, 0.0, seed=1)
    b = experiment(module, 2, runs, 0.02, seed=2)
    started = time.perf_counter()
    result = module.compare(a, b)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default="cf5908b")
    parser.add_argument(
        "--random-pairs",
        type=int,
        default=0,
        help="also compare and summarize this many random pairs of small experiments with "
        "both, and count those whose answers differ (for a REV with the same draws)",
    )
    args = parser.parse_args()
    before = load_before(args.before)
    if args.random_pairs:
        differing = same_on_random_pairs(before, args.random_pairs)
        print(f"random pairs: {differing} of {args.random_pairs} gave a different answer")
    times: dict[str, list[float]] = {"before": [], "after": []}
    encoded: dict[str, bytes] = {}
    for round_ in range(1, args.rounds + 1):
        for label, module in (("before", before), ("after", after)):
            seconds, result = timed(module, args.runs)
            times[label].append(seconds)
            encoded[label] = msgspec.json.encode(result)
            intervals = {
                s.name: (s.mean_diff_ci or s.raw_diff_ci)
                for s in result.scores  # type: ignore[attr-defined]
            }
            shown = ", ".join(
                f"{name} [{ci.low:.4f}, {ci.high:.4f}]" for name, ci in intervals.items() if ci
            )
            print(f"round {round_} {label:6} {seconds:7.3f} s  {shown}", flush=True)
    draw = random.Random(3)
    diffs = [draw.random() - 0.5 for _ in range(args.runs)]
    for part, call in (
        ("paired_bootstrap", lambda m: m.paired_bootstrap(diffs)),
        ("mcnemar_exact(1700, 1800)", lambda m: m.mcnemar_exact(1700, 1800)),
    ):
        for label, module in (("before", before), ("after", after)):
            started = time.perf_counter()
            call(module)
            times[f"{part} {label}"] = [time.perf_counter() - started]
        ratio = times[f"{part} before"][0] / times[f"{part} after"][0]
        print(
            f"{part}: before {times[f'{part} before'][0]:.3f} s, "
            f"after {times[f'{part} after'][0]:.4f} s, {ratio:.1f}x"
        )
    same = "the same" if encoded["before"] == encoded["after"] else "not the same"
    print(f"before and after gave {same} comparison, byte for byte")
    slow, fast = statistics.median(times["before"]), statistics.median(times["after"])
    print(
        f"\ncompare() on two {args.runs:,}-run experiments, 3 score names, 2000 resamples: "
        f"before {slow:.2f} s, after {fast:.3f} s (medians of {args.rounds}); "
        f"{slow / fast:.1f}x faster"
    )


if __name__ == "__main__":
    main()
