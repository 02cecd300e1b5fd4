"""SDK benchmark: run_experiment over 1,000 cases with an instant task and one Python
evaluator, at concurrency 8.

Starts an embedded PostgreSQL, the edge (`evalkit server --no-worker`) and one worker
(`evalkit worker`), each in its own process, syncs a dataset of 1,000 cases that select
the Python evaluator, creates a code-driven agent, then times `run_experiment(...)` in
this process from the call to the returned result: every run claimed, reported, scored
by the server (exact_match) and by the Python evaluator, and the experiment finished.

    uv run python benchmarks/sdk_experiment.py [--cases 1000] [--concurrency 8]
        [--profile FILE.html]

``--profile`` records the benchmark's own process (the SDK) with pyinstrument, which is
not a dependency of evalkit: ``uv pip install pyinstrument`` first.
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
from _stack import wait_http

from evalkit import serve
from evalkit.auth.secrets import generate_key
from evalkit.embedded import EmbeddedPostgres
from evalkit.otel.mapping import load_starter
from evalkit.sql import migrate

PASSWORD = "bench-password-1"
TARGET_RUNS_PER_SECOND = 100.0
EVALKIT = [sys.executable, "-c", "from evalkit.cli import main; main()"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--profile", type=Path, help="write a pyinstrument profile (HTML)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="evalkit-sdk-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    children: list[subprocess.Popen[bytes]] = []
    try:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        db_url = urlunsplit(urlsplit(cluster.admin_url)._replace(path="/bench"))
        migrate.upgrade(db_url)
        port = serve.free_port()
        env = dict(
            os.environ,
            EVALKIT_DATABASE_URL=db_url,
            EVALKIT_ENCRYPTION_KEY=generate_key(),
            EVALKIT_DATA_DIR=str(work / "data"),
            EVALKIT_ADMIN_PASSWORD=PASSWORD,
            EVALKIT_WORKER_CONCURRENCY=str(args.worker_concurrency),
        )
        edge_log = work / "edge.log"
        with edge_log.open("wb") as out:
            children.append(
                subprocess.Popen(
                    [*EVALKIT, "server", "--no-worker", "--port", str(port)],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", log=edge_log)
        children.append(
            subprocess.Popen(
                [*EVALKIT, "worker"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        token = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        cases = [
            {
                "id": f"case-{n:05d}",
                "content": {
                    "input": {"question": f"What is {n} + {n}?"},
                    "expected": {"answer": str(2 * n)},
                    "evaluators": {"exact_match": True, "custom": {"is_even": {}}},
                },
            }
            for n in range(args.cases)
        ]
        api.post(
            "/api/workspaces/admin/datasets/arith/sync", json={"cases": cases}
        ).raise_for_status()
        api.post(
            "/api/workspaces/admin/agents",
            json={"name": "instant", "mapping": load_starter("openinference")},
        ).raise_for_status()

        os.environ["EVALKIT_SERVER_URL"] = url
        os.environ["EVALKIT_TOKEN"] = token
        os.environ["EVALKIT_CLI_CONFIG_DIR"] = str(work / "cli")
        os.chdir(work)  # no evalkit.yaml here: the dataset is the server's
        from evalkit.sdk import evaluator, run_experiment

        @evaluator(name="is_even")
        def is_even(case, run) -> float:
            return 1.0 if int(run.answer or "1") % 2 == 0 else 0.0

        def task(input: dict) -> str:
            a, _, b = input["question"].removeprefix("What is ").rstrip("?").partition(" + ")
            return str(int(a) + int(b))

        print(
            f"{args.cases} cases, an instant task, one Python evaluator, concurrency "
            f"{args.concurrency}; edge and worker (concurrency {args.worker_concurrency}) in "
            f"their own processes; this machine: {os.cpu_count()} cores"
        )
        profiler = None
        if args.profile is not None:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.001, async_mode="disabled")
            profiler.start()
        started = time.perf_counter()
        result = run_experiment(
            dataset="arith",
            agent="instant",
            task=task,
            evaluators=[is_even],
            concurrency=args.concurrency,
            progress=False,
        )
        elapsed = time.perf_counter() - started
        if profiler is not None:
            profiler.stop()
            args.profile.write_text(profiler.output_html())
            print(profiler.output_text(unicode=True, color=False, show_all=False))
        if result.by_state != {"done": args.cases}:
            raise SystemExit(f"expected {args.cases} runs done, got {result.by_state}")
        means = {s["name"]: s["mean"] for s in result.scores}
        if means.get("is_even") != 1.0 or means.get("exact_match") != 1.0:
            raise SystemExit(f"unexpected scores: {means}")
        rate = args.cases / elapsed
        print(f"\n{'runs':>6}{'seconds':>9}{'runs/s':>9}{'vs 100/s':>10}")
        print(f"{args.cases:>6}{elapsed:>9.2f}{rate:>9.1f}{rate / TARGET_RUNS_PER_SECOND:>10.2f}")
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
