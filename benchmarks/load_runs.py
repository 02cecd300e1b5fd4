"""Load: 1,000 runs in flight across 10 agents, through the real worker.

Starts an embedded PostgreSQL, the edge (`evalkit server --no-worker`), the reference
harness with runs that take a few seconds (`evalkit harness example --run-seconds 3`) and
the worker(s) (`evalkit worker`), each in its own process. Ten agents on that harness, each
with `max_concurrent_runs` high enough to hold all its runs at once, each start an
experiment over a dataset of (runs / agents) cases, all ten within a few milliseconds. It
watches, every 0.5 s: runs in flight, each process's resident memory, the database
connections each process holds, and procrastinate's queue; and it prints:

- time from the first experiment's POST to the last experiment finished, and runs/s;
- the floor that time cannot go under (one run's harness time) and the ratio to it;
- errors: runs not `done`, jobs failed, error lines in each process's log (must be 0);
- peak runs in flight, peak RSS of the edge, the worker(s) and the harness;
- peak database connections per process, and jobs left in the queue at the end.

    uv run python benchmarks/load_runs.py [--runs 1000] [--agents 10] [--run-seconds 3]
        [--poll-interval 1] [--workers 1] [--worker-concurrency 32]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _load import Watch, jobs_by_status, load_stack, machine, memory_mb, report_found, wait_http

from evalkit import serve

IN_FLIGHT = ("starting", "running", "stopping", "collecting", "scoring")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs in all (default 1000)")
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--run-seconds", type=float, default=3.0, help="harness time a run")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="agents' poll_interval")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600, help="give up after (seconds)")
    args = parser.parse_args()
    per_agent = max(1, args.runs // args.agents)
    runs = per_agent * args.agents

    with load_stack(EVALKIT_WORKER_CONCURRENCY=str(args.worker_concurrency)) as stack:
        stack.start_edge()
        harness_port = serve.free_port()
        stack.spawn(
            "harness",
            [
                "harness",
                "example",
                "--port",
                str(harness_port),
                "--run-seconds",
                str(args.run_seconds),
            ],
        )
        harness_url = f"http://127.0.0.1:{harness_port}"
        wait_http(harness_url + "/capabilities")
        for n in range(args.workers):
            stack.spawn(f"worker{n + 1}" if args.workers > 1 else "worker", ["worker"])
        auth = {"Authorization": f"Bearer {stack.admin_token()}"}
        with httpx.Client(base_url=stack.url, headers=auth, timeout=120) as api:
            api.post("/api/workspaces", json={"name": "bench"}).raise_for_status()
            cases = [
                {"id": f"case-{n:05d}", "content": {"input": {"question": f"What is {n} + 1?"}}}
                for n in range(per_agent)
            ]
            api.post(
                "/api/workspaces/bench/datasets/arith/sync", json={"cases": cases}
            ).raise_for_status()
            for a in range(args.agents):
                api.post(
                    "/api/workspaces/bench/agents",
                    json={
                        "name": f"agent{a:02d}",
                        "harness_url": harness_url,
                        "max_concurrent_runs": per_agent,
                        "poll_interval": args.poll_interval,
                    },
                ).raise_for_status()
            print(
                f"{runs} runs: {args.agents} agents x {per_agent} cases, "
                f"max_concurrent_runs {per_agent}; harness run time {args.run_seconds:g} s, "
                f"poll every {args.poll_interval:g} s; {args.workers} worker process(es) at "
                f"concurrency {args.worker_concurrency}; {machine()} before the run",
                flush=True,
            )

            peak_in_flight = 0
            with Watch(stack) as watch:
                started = time.perf_counter()
                experiments = []
                for a in range(args.agents):
                    created = api.post(
                        "/api/experiments",
                        json={"dataset": "arith@bench", "agent": f"agent{a:02d}@bench"},
                    )
                    created.raise_for_status()
                    experiments.append(created.json()["id"])
                posted = time.perf_counter() - started
                open_ = set(experiments)
                finished_at: dict[int, float] = {}
                while open_:
                    if time.perf_counter() - started > args.timeout:
                        break
                    for experiment_id in list(open_):
                        brief = api.get(f"/api/experiments/{experiment_id}/brief").json()
                        if brief["status"] == "finished":
                            finished_at[experiment_id] = time.perf_counter() - started
                            open_.discard(experiment_id)
                    in_flight = stack.query(
                        "SELECT count(*) FROM runs WHERE state = ANY(%s)", [list(IN_FLIGHT)]
                    )[0][0]
                    peak_in_flight = max(peak_in_flight, in_flight)
                    time.sleep(0.25)
                elapsed = time.perf_counter() - started
                time.sleep(1.0)  # the jobs that finished the runs leave the queue
            states = dict(stack.query("SELECT state::text, count(*) FROM runs GROUP BY 1"))
            jobs = jobs_by_status(stack)
            overdue = stack.query(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo' "
                "AND (scheduled_at IS NULL OR scheduled_at <= now())"
            )[0][0]
            queue_left = stack.query(
                "SELECT task_name, status::text, count(*) FROM procrastinate_jobs "
                "WHERE status IN ('todo', 'doing') GROUP BY 1, 2 ORDER BY 1, 2"
            )
            peaks = {p.name: memory_mb(p.popen.pid)[1] for p in stack.processes}
            errors = {p.name: p.error_lines() for p in stack.processes}

    done = states.get("done", 0)
    not_done = runs - done
    failed_jobs = jobs.get("failed", 0)
    error_lines = sum(len(lines) for lines in errors.values())
    floor = args.run_seconds
    print()
    print(f"load: {runs} runs in flight across {args.agents} agents ({machine()} at the end)")
    print(f"{'measure':<44}{'value':>12}")
    print(f"{'experiments posted in, s':<44}{posted:>12.2f}")
    print(f"{'time to all done, s':<44}{elapsed:>12.1f}")
    if finished_at:
        first = min(finished_at.values())
        print(f"{'  first experiment finished at, s':<44}{first:>12.1f}")
    print(f"{'runs/s (runs / time to all done)':<44}{runs / elapsed:>12.1f}")
    print(f"{'floor: one run of the harness, s':<44}{floor:>12.1f}")
    print(f"{'time to all done / floor':<44}{elapsed / floor:>12.2f}")
    print(f"{'peak runs in flight':<44}{peak_in_flight:>12}")
    print(f"{'errors: runs not done':<44}{not_done:>12}")
    print(f"{'errors: jobs failed':<44}{failed_jobs:>12}")
    print(f"{'errors: error lines in the processes logs':<44}{error_lines:>12}")
    for name, peak in peaks.items():
        print(f"{'peak RSS, MB: ' + name:<44}{peak:>12.0f}")
    for name, count in sorted(watch.connections.items()):
        print(f"{'peak database connections: ' + name:<44}{count:>12}")
    print(f"{'peak database connections, all':<44}{watch.total_connections:>12}")
    print(f"{'jobs left in the queue (todo or doing)':<44}{sum(c for *_, c in queue_left):>12}")
    print(f"{'  of them due now (todo, not scheduled later)':<44}{overdue:>12}")
    for task, status, count in queue_left:
        print(f"    {task} {status}: {count} (periodic or scheduled)")
    problems = []
    if open_:
        problems.append(f"{len(open_)} experiments not finished after {args.timeout:.0f} s")
    if not_done:
        problems.append(f"runs by state: {states}")
    if failed_jobs:
        problems.append(f"{failed_jobs} jobs failed")
    for name, lines in errors.items():
        for line in lines[:5]:
            problems.append(f"{name}: {line[:200]}")
    problems.extend(watch.failures)
    report_found(problems)


if __name__ == "__main__":
    main()
