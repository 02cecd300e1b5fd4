"""The comparison's statistics on two 10,000-run experiments, before and after the paired
bootstrap was vectorised with numpy, timed side by side in one process.

    uv run python benchmarks/compare_bootstrap.py [--runs 10000] [--rounds 3] [--before REV]

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
    args = parser.parse_args()
    before = load_before(args.before)
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
