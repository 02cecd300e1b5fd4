"""Run engine benchmark: experiments of 2,000 cases through one worker.

Starts an embedded PostgreSQL, the edge on loopback (in this process), the reference
harness answering instantly (`evalkit harness example`, its own process) and one worker
(`evalkit worker`, its own process), syncs a dataset of 2,000 cases, then times
experiments from `POST /api/experiments` to the moment every run is done, at two
settings of the agent's `max_concurrent_runs`, side by side.

Database work per run is read from PostgreSQL's own counters (pg_stat_database): every
statement the edge, the worker and procrastinate send outside an explicit transaction is
one transaction, so "transactions per run" is a close count of the round trips.

    uv run python benchmarks/run_engine.py [--cases 2000] [--slots 8 32]
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
TARGET_RUNS_PER_SECOND = 100.0
EVALKIT = [sys.executable, "-c", "from evalkit.cli import main; main()"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--slots", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--worker-concurrency", type=int, default=32)
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
                    "harness_url": harness_url,
                    "max_concurrent_runs": slots,
                    "poll_interval": 0.05,
                },
            ).raise_for_status()
            before = transactions(cluster.admin_url, "bench")
            started = time.perf_counter()
            created = api.post(
                "/api/experiments", json={"dataset": "arith@bench", "agent": f"{name}@bench"}
            )
            created.raise_for_status()
            experiment_id = created.json()["id"]
            while True:
                detail = api.get(f"/api/experiments/{experiment_id}").json()
                if detail["status"] == "finished":
                    break
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            spent = transactions(cluster.admin_url, "bench") - before
            done = detail["by_state"].get("done", 0)
            if done != args.cases:
                raise SystemExit(f"expected {args.cases} runs done, got {detail['by_state']}")
            rows.append((slots, elapsed, args.cases / elapsed, spent / args.cases))

        print()
        print(
            f"{'max_concurrent_runs':>20}{'seconds':>9}{'runs/s':>9}{'vs 100/s':>10}{'tx/run':>8}"
        )
        for slots, elapsed, rate, per_run in rows:
            ratio = rate / TARGET_RUNS_PER_SECOND
            print(f"{slots:>20}{elapsed:>9.2f}{rate:>9.1f}{ratio:>10.2f}{per_run:>8.1f}")
        if len(rows) > 1:
            gain = rows[-1][2] / rows[0][2]
            print(f"\nspeed-up from {rows[0][0]} to {rows[-1][0]} slots: {gain:.2f}x")
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
