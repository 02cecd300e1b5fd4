"""Scoring benchmark: re-score an experiment of 1,000 runs with every built-in evaluator.

Starts an embedded PostgreSQL, the edge on loopback (in this process), the reference
harness (`evalkit harness example`, its own process) and one worker (`evalkit worker`, its
own process); syncs 1,000 cases that each select all 13 built-ins (8 checks, 5 gauges);
runs the experiment once (round 1 is scored as each run finishes); then times, side by
side, `POST /api/experiments/{id}/evaluate` until every scoring job is done:

- a full round (every evaluator of every run, 13 scores a run);
- a round limited to one evaluator (`--evaluator exact_match`: 1 score a run computed, the
  other 12 carried over from the previous round in one statement).

Database work per run is read from PostgreSQL's own counters (pg_stat_database), so
"tx/run" is a close count of the round trips a scoring job makes.

    uv run python benchmarks/scoring.py [--cases 1000] [--worker-concurrency 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _stack import local_stack

EVALUATORS = {
    "exact_match": True,
    "numeric": {"tolerance": 0.5},
    "contains": ["0"],
    "not_contains": {"values": ["sorry"], "ignore_case": True},
    "regex": r"^-?\d+$",
    "json_schema": {"type": "object", "required": ["result"]},
    "tool_calls": {"required": ["calculator"], "forbidden": ["delete_file"]},
    "max_steps": 5,
    "latency": True,
    "tokens": True,
    "cost": True,
    "steps": True,
    "tool_call_count": True,
}


def wait_round(api: httpx.Client, experiment_id: int, round_: int) -> dict:
    while True:
        rounds = api.get(f"/api/experiments/{experiment_id}/rounds").json()
        found = [r for r in rounds if r["round"] == round_]
        if found and found[0]["pending_jobs"] == 0:
            return found[0]
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--worker-concurrency", type=int, default=8)
    args = parser.parse_args()

    with local_stack(args.worker_concurrency) as stack:
        api, harness_url = stack.api, stack.harness_url
        cases = [
            {
                "id": f"case-{n:05d}",
                "content": {
                    "input": {"question": f"What is {n} + {n}?"},
                    "expected": {"answer": str(2 * n)},
                    "evaluators": EVALUATORS,
                },
            }
            for n in range(args.cases)
        ]
        api.post(
            "/api/workspaces/bench/datasets/arith/sync", json={"cases": cases}
        ).raise_for_status()
        api.post(
            "/api/workspaces/bench/agents",
            json={
                "name": "ref",
                "harness_url": harness_url,
                "max_concurrent_runs": 32,
                "poll_interval": 0.05,
            },
        ).raise_for_status()
        created = api.post(
            "/api/experiments", json={"dataset": "arith@bench", "agent": "ref@bench"}
        )
        created.raise_for_status()
        experiment_id = created.json()["id"]
        while api.get(f"/api/experiments/{experiment_id}").json()["status"] != "finished":
            time.sleep(0.1)
        print(
            f"{args.cases} runs, 13 built-in evaluators each; one worker process "
            f"(concurrency {args.worker_concurrency}); this machine: {os.cpu_count()} cores"
        )

        rows = []
        for label, body in (
            ("every evaluator", {}),
            ("exact_match only", {"evaluators": ["exact_match"]}),
        ):
            before = stack.transactions()
            started = time.perf_counter()
            opened = api.post(f"/api/experiments/{experiment_id}/evaluate", json=body)
            opened.raise_for_status()
            queued = time.perf_counter() - started
            done = wait_round(api, experiment_id, opened.json()["round"])
            elapsed = time.perf_counter() - started
            spent = stack.transactions() - before
            expected = args.cases * len(EVALUATORS)
            if done["scores"] != expected or done["errors"] or done["failed_jobs"]:
                raise SystemExit(f"round {done['round']} is not complete: {done}")
            rows.append((label, queued, elapsed, args.cases / elapsed, spent / args.cases))

        print()
        print(f"{'round':>18}{'queued s':>10}{'seconds':>9}{'runs/s':>9}{'tx/run':>8}")
        for label, queued, elapsed, rate, per_run in rows:
            print(f"{label:>18}{queued:>10.2f}{elapsed:>9.2f}{rate:>9.1f}{per_run:>8.1f}")
        print(f"\nfull round vs one evaluator: {rows[0][2] / rows[1][2]:.2f}x the time")


if __name__ == "__main__":
    main()
