"""Sync benchmark: 5,000 cases and 200 fixtures (1 MB in all) through the real CLI.

Starts an embedded PostgreSQL and the edge on loopback, writes a suite, then times the CLI
(`evalkit sync`, a separate process as a user would run it) for the first sync and for a
re-sync with nothing changed.

    uv run python benchmarks/sync.py [--cases 5000] [--fixtures 200]
"""

from __future__ import annotations

import argparse
import os
import random
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
TARGETS = {"first sync": 15.0, "no-change re-sync": 3.0}


def write_suite(root: Path, cases: int, fixtures: int) -> Path:
    rng = random.Random(7)
    (root / "fixtures").mkdir(parents=True)
    lines = ["cases_dir: cases", "fixtures:"]
    per_fixture = 2**20 // fixtures
    for n in range(fixtures):
        (root / "fixtures" / f"f{n}.bin").write_bytes(rng.randbytes(per_fixture))
        lines.append(f"  f{n}: fixtures/f{n}.bin")
    (root / "evalkit.yaml").write_text("\n".join(lines) + "\n")
    suite = root / "cases" / "bench"
    suite.mkdir(parents=True)
    for n in range(cases):
        files = f"\n  files: [f{(n // 5) % fixtures}]" if n % 5 == 0 else ""
        (suite / f"case-{n:05d}.yaml").write_text(
            f"input:\n  question: What is {n} + {n}?{files}\n"
            f"expected:\n  answer: '{2 * n}'\n"
            f"tags: [arithmetic, t{n % 10}]\n"
            "evaluators:\n  exact_match: true\n  contains: ['" + str(2 * n) + "']\n"
        )
    return suite


def start_server(db_url: str, data_dir: Path) -> serve.ThreadedServer:
    settings = Settings(data_dir=str(data_dir), encryption_key=generate_key())
    settings.server.port = serve.free_port()
    return serve.ThreadedServer(settings, db_url, env={"EVALKIT_ADMIN_PASSWORD": PASSWORD})


def timed_sync(suite: Path, env: dict[str, str]) -> float:
    command = [
        sys.executable,
        "-c",
        "from evalkit.cli import main; main()",
        "sync",
        str(suite),
        "--branch",
        "bench",
        "--sha",
        "0" * 40,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sync failed: {done.stderr}")
    print("   ", done.stdout.splitlines()[0])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--fixtures", type=int, default=200)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    try:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        parts = urlsplit(cluster.admin_url)
        db_url = urlunsplit(parts._replace(path="/bench"))
        migrate.upgrade(db_url)
        server = start_server(db_url, work / "data")
        url = server.url
        token = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        env = dict(
            os.environ,
            EVALKIT_SERVER_URL=url,
            EVALKIT_TOKEN=token,
            EVALKIT_CLI_CONFIG_DIR=str(work / "cli"),
        )
        suite = write_suite(work / "repo", args.cases, args.fixtures)
        print(f"suite: {args.cases} cases, {args.fixtures} fixtures (1 MB); CLI in a subprocess")
        figures = {
            "first sync": timed_sync(suite, env),
            "no-change re-sync": timed_sync(suite, env),
        }
        print()
        print(f"{'run':<20}{'seconds':>9}{'target':>9}{'ratio':>8}")
        for name, seconds in figures.items():
            target = TARGETS[name]
            print(f"{name:<20}{seconds:>9.2f}{target:>8.0f}s{seconds / target:>8.2f}")
        server.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
