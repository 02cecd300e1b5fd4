"""Load: the read API and the web pages under concurrent users, over seeded experiments.

Starts an embedded PostgreSQL and the edge (`evalkit server --no-worker`, its own process),
seeds a dataset of 500 cases with five evaluators each and four experiments of 500 cases x
10 repetitions (5,000 runs each, every run `done` with a trajectory and five scores; the
runs are queued through the API and filled in with set-based SQL, as `web_pages.py --seed
sql` does, alternating two versions of the dataset so comparisons have regressions).

Then 20 users (each its own httpx.AsyncClient and web session, logged in through the login
form; API calls with a bearer token) each request a route picked at random from the API
reads and web pages below, back to back with no pause, for 60 s. Every route is requested
once before the clock starts (the first request computes and keeps an experiment's score
summary and a comparison's statistics). It prints requests/s, p50, p95 and p99 per route
and for all, errors (any answer but 200, or no answer: must be 0), and the edge's resident
memory at the start and the end of the timed phase and its peak.

    uv run python benchmarks/load_reads.py [--users 20] [--seconds 60] [--cases 500]
        [--repetitions 10] [--experiments 4] [--only WORDS...]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _load import (
    PASSWORD,
    Watch,
    load_stack,
    machine,
    memory_mb,
    percentile,
    report_found,
    wait_http,
)
from web_pages import cases, fill_with_sql, start_experiment

from evalkit import serve


def routes(experiments: list[int], runs: int) -> dict[str, object]:
    """Route name -> path, or a function of the random generator giving a path."""
    a, b = experiments[-2], experiments[-1]

    def some(rng: random.Random) -> int:
        return rng.choice(experiments)

    return {
        "api experiment list": "/api/experiment-list",
        "api experiment": lambda r: f"/api/experiments/{some(r)}",
        "api experiment brief": lambda r: f"/api/experiments/{some(r)}/brief",
        "api runs, a page": lambda r: f"/api/experiments/{some(r)}/runs?offset={r.randrange(runs)}",
        "api experiment scores": lambda r: f"/api/experiments/{some(r)}/scores",
        "api experiment cases": lambda r: f"/api/experiments/{some(r)}/cases",
        "api compare": f"/api/experiments/{a}/compare/{b}",
        "api compare cases": f"/api/experiments/{a}/compare/{b}/cases",
        "api run": "run",
        "api run scores": "run-scores",
        "api dataset cases": "/api/workspaces/bench/datasets/arith/cases",
        "api agents": "/api/agents",
        "web experiments": "/experiments",
        "web experiments of a dataset": "/experiments?dataset=arith%40bench",
        "web experiment": lambda r: f"/experiments/{some(r)}",
        "web experiment, a page": lambda r: f"/experiments/{some(r)}?offset={r.randrange(runs)}",
        "web compare": f"/experiments/{a}/compare/{b}",
        "web compare, changed": f"/experiments/{a}/compare/{b}?changed=1",
        "web run": "web-run",
    }


def resolve(target: object, rng: random.Random, run_ids: list[int]) -> str:
    if callable(target):
        return str(target(rng))
    if target == "run":
        return f"/api/runs/{rng.choice(run_ids)}"
    if target == "run-scores":
        return f"/api/runs/{rng.choice(run_ids)}/scores"
    if target == "web-run":
        return f"/runs/{rng.choice(run_ids)}"
    return str(target)


async def login(url: str, token: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=url, timeout=120)
    answer = await client.post(
        "/login", data={"username": "admin", "password": PASSWORD, "next": "/"}
    )
    if answer.status_code != 303:
        raise SystemExit(f"login form answered {answer.status_code}")
    client.headers["X-Bench-Token"] = token
    return client


async def get(client: httpx.AsyncClient, path: str) -> httpx.Response:
    headers = {}
    if path.startswith("/api/"):
        headers["Authorization"] = f"Bearer {client.headers['X-Bench-Token']}"
    return await client.get(path, headers=headers)


async def warm(client: httpx.AsyncClient, table: dict[str, object], run_ids: list[int]) -> None:
    """Every route once; a page still computing its statistics until it has them."""
    rng = random.Random(0)
    for name, target in table.items():
        path = resolve(target, rng, run_ids)
        deadline = time.monotonic() + 120
        while True:
            answer = await get(client, path)
            if answer.status_code != 200:
                raise SystemExit(f"{name}: GET {path} answered {answer.status_code}")
            if "reloads by itself" not in answer.text or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)


async def load(
    clients: list[httpx.AsyncClient], table: dict[str, object], run_ids: list[int], seconds: float
) -> tuple[float, dict[str, list[float]], dict[str, dict[str, int]]]:
    names = list(table)
    timings: dict[str, list[float]] = {name: [] for name in names}
    errors: dict[str, dict[str, int]] = {}
    stop = time.perf_counter() + seconds

    async def user(n: int, client: httpx.AsyncClient) -> None:
        rng = random.Random(n)
        while time.perf_counter() < stop:
            name = rng.choice(names)
            path = resolve(table[name], rng, run_ids)
            began = time.perf_counter()
            try:
                answer = await get(client, path)
                problem = None if answer.status_code == 200 else str(answer.status_code)
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            if problem is None:
                timings[name].append(time.perf_counter() - began)
            else:
                errors.setdefault(name, {})
                errors[name][problem] = errors[name].get(problem, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(user(n, c) for n, c in enumerate(clients)))
    return time.perf_counter() - started, timings, errors


async def session(
    url: str, token: str, users: int, table: dict[str, object], run_ids: list[int], seconds: float
) -> tuple[float, dict[str, list[float]], dict[str, dict[str, int]]]:
    clients = [await login(url, token) for _ in range(users)]
    try:
        await warm(clients[0], table, run_ids)
        return await load(clients, table, run_ids, seconds)
    finally:
        for client in clients:
            await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60, help="timed phase (default 60)")
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--experiments", type=int, default=4, help="at least 2")
    parser.add_argument(
        "--only", nargs="+", metavar="WORDS", help="only the routes whose name has one of these"
    )
    args = parser.parse_args()
    runs = args.cases * args.repetitions

    with load_stack() as stack:
        edge = stack.start_edge()
        harness_port = serve.free_port()
        stack.spawn("harness", ["harness", "example", "--port", str(harness_port)])
        wait_http(f"http://127.0.0.1:{harness_port}/capabilities")
        token = stack.admin_token()
        started = time.perf_counter()
        experiments = []
        with httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as api:
            api.post("/api/workspaces", json={"name": "bench"}).raise_for_status()
            api.post(
                "/api/workspaces/bench/agents",
                json={"name": "ref", "harness_url": f"http://127.0.0.1:{harness_port}"},
            ).raise_for_status()
            sync = "/api/workspaces/bench/datasets/arith/sync"
            for n in range(max(2, args.experiments)):
                api.post(sync, json={"cases": cases(args.cases, 1 + n % 2)}).raise_for_status()
                experiment_id = start_experiment(api, args.repetitions)
                fill_with_sql(stack.db_url, experiment_id)
                experiments.append(experiment_id)
        run_ids = [row[0] for row in stack.query("SELECT id FROM runs ORDER BY id")]
        table = routes(experiments, runs)
        if args.only:
            table = {k: v for k, v in table.items() if any(w in k for w in args.only)}
            if not table:
                raise SystemExit(f"no route's name has any of {args.only}")
        print(
            f"{len(experiments)} experiments of {runs:,} runs (5 scores a run) seeded in "
            f"{time.perf_counter() - started:.0f} s; {args.users} users, {len(table)} routes "
            f"picked at random, no pause, for {args.seconds:g} s; one edge process; "
            f"{machine()} before the run",
            flush=True,
        )
        rss_start = memory_mb(edge.popen.pid)[0]
        with Watch(stack, every=1.0) as watch:
            elapsed, timings, errors = asyncio.run(
                session(stack.url, token, args.users, table, run_ids, args.seconds)
            )
        rss_end, rss_peak = memory_mb(edge.popen.pid)
        edge_errors = edge.error_lines()

    everything = sorted(t for values in timings.values() for t in values)
    error_count = sum(sum(e.values()) for e in errors.values())
    print()
    print(
        f"{'route':<30}{'requests':>9}{'req/s':>7}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}"
        f"{'errors':>7}"
    )
    for name, values in timings.items():
        values.sort()
        failed = sum(errors.get(name, {}).values())
        median = statistics.median(values) * 1000 if values else float("nan")
        print(
            f"{name:<30}{len(values):>9}{len(values) / elapsed:>7.1f}{median:>8.0f}"
            f"{percentile(values, 0.95) * 1000:>8.0f}{percentile(values, 0.99) * 1000:>8.0f}"
            f"{failed:>7}"
        )
    median = statistics.median(everything) * 1000 if everything else float("nan")
    print(
        f"{'all':<30}{len(everything):>9}{len(everything) / elapsed:>7.1f}{median:>8.0f}"
        f"{percentile(everything, 0.95) * 1000:>8.0f}{percentile(everything, 0.99) * 1000:>8.0f}"
        f"{error_count:>7}"
    )
    print()
    print(f"{'errors (answers not 200, or none)':<44}{error_count:>10}")
    print(f"{'error lines in the edge log':<44}{len(edge_errors):>10}")
    print(f"{'edge RSS at the start, MB':<44}{rss_start:>10.0f}")
    print(f"{'edge RSS at the end, MB':<44}{rss_end:>10.0f}")
    print(f"{'edge peak RSS, MB':<44}{rss_peak:>10.0f}")
    series = watch.rss.get("edge", [])
    steps = [f"{mb:.0f}" for at, mb in series[:: max(1, round(10 / watch.every))]]
    print(f"edge RSS every 10 s, MB: {' '.join(steps)}")
    print(f"{'peak database connections of the edge':<44}{watch.connections.get('edge', 0):>10}")
    print(f"({machine()} at the end)")
    problems = [f"{name}: {found}" for name, found in errors.items()]
    problems.extend(f"edge: {line[:200]}" for line in edge_errors[:5])
    problems.extend(watch.failures)
    report_found(problems)


if __name__ == "__main__":
    main()
