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
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from evalkit import serve
from evalkit.auth.secrets import generate_key
from evalkit.config import Settings
from evalkit.embedded import EmbeddedPostgres
from evalkit.sql import migrate

PASSWORD = "bench-password-1"
EVALKIT = [sys.executable, "-c", "from evalkit.cli import main; main()"]
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


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=1).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not come up") from None
            time.sleep(0.1)


def transactions(admin_url: str, db: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [db]
        ).fetchone()
    return int(row[0]) if row else 0


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

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    children: list[subprocess.Popen[bytes]] = []
    server = None
    try:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        db_url = urlunsplit(urlsplit(cluster.admin_url)._replace(path="/bench"))
        migrate.upgrade(db_url)
        key = generate_key()
        settings = Settings(data_dir=str(work / "data"), encryption_key=key)
        settings.server.port = serve.free_port()
        settings.egress.allow_private = True
        server = serve.ThreadedServer(settings, db_url, env={"EVALKIT_ADMIN_PASSWORD": PASSWORD})
        url = server.url

        harness_port = serve.free_port()
        children.append(
            subprocess.Popen(
                [*EVALKIT, "harness", "example", "--port", str(harness_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        harness_url = f"http://127.0.0.1:{harness_port}"
        wait_http(harness_url + "/capabilities")
        worker_env = dict(
            os.environ,
            EVALKIT_DATABASE_URL=db_url,
            EVALKIT_ENCRYPTION_KEY=key,
            EVALKIT_DATA_DIR=str(work / "data"),
            EVALKIT_EGRESS_ALLOW_PRIVATE="true",
            EVALKIT_WORKER_CONCURRENCY=str(args.worker_concurrency),
        )
        children.append(
            subprocess.Popen([*EVALKIT, "worker"], env=worker_env, stderr=subprocess.DEVNULL)
        )

        token = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        api.post("/api/workspaces", json={"name": "bench"}).raise_for_status()
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
            before = transactions(cluster.admin_url, "bench")
            started = time.perf_counter()
            opened = api.post(f"/api/experiments/{experiment_id}/evaluate", json=body)
            opened.raise_for_status()
            queued = time.perf_counter() - started
            done = wait_round(api, experiment_id, opened.json()["round"])
            elapsed = time.perf_counter() - started
            spent = transactions(cluster.admin_url, "bench") - before
            expected = args.cases * len(EVALUATORS)
            if done["scores"] != expected or done["errors"] or done["failed_jobs"]:
                raise SystemExit(f"round {done['round']} is not complete: {done}")
            rows.append((label, queued, elapsed, args.cases / elapsed, spent / args.cases))

        print()
        print(f"{'round':>18}{'queued s':>10}{'seconds':>9}{'runs/s':>9}{'tx/run':>8}")
        for label, queued, elapsed, rate, per_run in rows:
            print(f"{label:>18}{queued:>10.2f}{elapsed:>9.2f}{rate:>9.1f}{per_run:>8.1f}")
        print(f"\nfull round vs one evaluator: {rows[0][2] / rows[1][2]:.2f}x the time")
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        if server is not None:
            server.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
