"""Run engine benchmark: experiments of 2,000 cases through one worker.

Starts an embedded PostgreSQL, the edge on loopback (in this process), the reference
harness answering instantly (`evalkit harness example`, its own process) and one worker
(`evalkit worker`, its own process), syncs a dataset of 2,000 cases, then times
experiments from their creation to their close (the server's own timestamps: every run
done), at two settings of the agent's `max_concurrent_runs`, side by side.

Database work per run is read from PostgreSQL's own counters (pg_stat_database): every
statement the edge, the worker and procrastinate send outside an explicit transaction is
one transaction, so "transactions per run" is a close count of the round trips.

    uv run python benchmarks/run_engine.py [--cases 2000] [--slots 8 32]

With ``--against DIR`` (a checkout of an older commit with its own ``.venv``, e.g. a
``git worktree``), the benchmark runs ``--rounds`` times in each tree, alternating old and
new, and prints both trees' runs/s per setting with the new/old ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _stack import local_stack, run_in_tree

TARGET_RUNS_PER_SECOND = 300.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--slots", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--against", type=Path, help="an older checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.against is not None:
        compare_trees(args)
        return

    with local_stack(args.worker_concurrency) as stack:
        api = stack.api
        cases = [
            {"id": f"case-{n:05d}", "content": {"input": {"question": f"What is {n} + {n}?"}}}
            for n in range(args.cases)
        ]
        api.post(
            "/api/workspaces/bench/datasets/arith/sync", json={"cases": cases}
        ).raise_for_status()
        print(
            f"{args.cases} cases; reference harness answering at once; one worker process "
            f"(concurrency {args.worker_concurrency}); this machine: {os.cpu_count()} cores"
        )

        rows = []
        for slots in args.slots:
            name = f"ref{slots}"
            api.post(
                "/api/workspaces/bench/agents",
                json={
                    "name": name,
                    "harness_url": stack.harness_url,
                    "max_concurrent_runs": slots,
                    "poll_interval": 0.05,
                },
            ).raise_for_status()
            before = stack.transactions()
            cpu_before = stack.cpu_seconds()
            created = api.post(
                "/api/experiments", json={"dataset": "arith@bench", "agent": f"{name}@bench"}
            )
            created.raise_for_status()
            experiment_id = created.json()["id"]
            # The brief (counts by state, no run list), four times a second, keeps the
            # poll's own cost out of the measure (the full detail of 2,000 runs 20 times a
            # second took about half a core); the time is the server's own, from the
            # experiment's creation to its close.
            while True:
                detail = api.get(f"/api/experiments/{experiment_id}/brief?scores=0").json()
                if detail["status"] == "finished":
                    break
                time.sleep(0.25)
            elapsed = (
                datetime.fromisoformat(detail["finished_at"])
                - datetime.fromisoformat(detail["created_at"])
            ).total_seconds()
            spent = stack.transactions() - before
            cpu = {
                part: (seconds - cpu_before[part]) * 1000 / args.cases
                for part, seconds in stack.cpu_seconds().items()
            }
            done = detail["by_state"].get("done", 0)
            if done != args.cases:
                raise SystemExit(f"expected {args.cases} runs done, got {detail['by_state']}")
            rows.append((slots, elapsed, args.cases / elapsed, spent / args.cases, cpu))

    print()
    print(f"{'max_concurrent_runs':>20}{'seconds':>9}{'runs/s':>9}{'vs 300/s':>10}{'tx/run':>8}")
    for slots, elapsed, rate, per_run, _ in rows:
        ratio = rate / TARGET_RUNS_PER_SECOND
        print(f"{slots:>20}{elapsed:>9.2f}{rate:>9.1f}{ratio:>10.2f}{per_run:>8.1f}")
    print("\nCPU milliseconds per run, by process (2 cores give 2,000 ms a second):")
    parts = list(rows[0][4])
    print(f"{'max_concurrent_runs':>20}" + "".join(f"{part:>10}" for part in parts) + "     total")
    for slots, _, _, _, cpu in rows:
        cells = "".join(f"{cpu[part]:>10.2f}" for part in parts)
        print(f"{slots:>20}{cells}{sum(cpu.values()):>10.2f}")
    if len(rows) > 1:
        gain = rows[-1][2] / rows[0][2]
        print(f"\nspeed-up from {rows[0][0]} to {rows[-1][0]} slots: {gain:.2f}x")


ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
CPU_ROW = re.compile(r"^\s*(\d+)((?:\s+[\d.]+){5})\s*$")
"""A row of the CPU table: slots, then worker, harness, postgres, edge and total ms a run."""


def compare_trees(args: argparse.Namespace) -> None:
    """Alternate this tree's benchmark with the same benchmark of ``args.against``."""
    old = args.against.resolve()
    new = Path(__file__).resolve().parents[1]
    passed = ["--cases", str(args.cases), "--worker-concurrency", str(args.worker_concurrency)]
    passed += ["--slots", *map(str, args.slots)]
    rates: dict[str, dict[int, list[float]]] = {"old": {}, "new": {}}
    cpu: dict[str, dict[int, list[list[float]]]] = {"old": {}, "new": {}}
    for round_no in range(1, args.rounds + 1):
        for name, tree in (("old", old), ("new", new)):
            print(f"round {round_no}: {name} tree ({tree}), load {_load()}", flush=True)
            found_rates, found_cpu = _one_run(tree, passed)
            for slots, rate in found_rates.items():
                rates[name].setdefault(slots, []).append(rate)
            for slots, spent in found_cpu.items():
                cpu[name].setdefault(slots, []).append(spent)
    print(f"\n{'max_concurrent_runs':>20}{'old runs/s':>12}{'new runs/s':>12}{'new/old':>9}")
    for slots in args.slots:
        before = statistics.median(rates["old"][slots])
        after = statistics.median(rates["new"][slots])
        print(f"{slots:>20}{before:>12.1f}{after:>12.1f}{after / before:>9.2f}")
    print(f"(medians of {args.rounds} alternating rounds; each: {rates})")
    print("\nCPU ms a run, medians by process (worker, harness, postgres, edge, total):")
    for slots in args.slots:
        for name in ("old", "new"):
            by_part = zip(*cpu[name][slots], strict=True)
            cells = "".join(f"{statistics.median(part):>9.2f}" for part in by_part)
            print(f"{slots:>20} {name:>4}{cells}")
        total_old = statistics.median(row[-1] for row in cpu["old"][slots])
        total_new = statistics.median(row[-1] for row in cpu["new"][slots])
        print(f"{slots:>20} new/old total {total_new / total_old:.2f}")


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _one_run(tree: Path, passed: list[str]) -> tuple[dict[int, float], dict[int, list[float]]]:
    """One run's runs/s and CPU ms a run (by process, then the total), by slot count."""
    # This script in both trees (only evalkit differs), so both are timed the same way.
    stdout = run_in_tree(tree, Path(__file__).resolve(), passed)
    rates: dict[int, float] = {}
    cpu: dict[int, list[float]] = {}
    for line in stdout.splitlines():
        if match := ROW.match(line):
            rates[int(match[1])] = float(match[3])
        elif match := CPU_ROW.match(line):
            cpu[int(match[1])] = [float(cell) for cell in match[2].split()]
    return rates, cpu


if __name__ == "__main__":
    main()
