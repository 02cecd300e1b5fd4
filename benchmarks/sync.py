"""Sync benchmark: 5,000 cases and 200 fixtures (1 MB in all) through the real CLI.

Starts an embedded PostgreSQL and the edge on loopback, writes a suite, then times the CLI
(`evalkit sync`, a separate process as a user would run it): the first sync, re-syncs with
nothing changed, one case file edited, one fixture edited (five cases attach it), and every
case file touched (new mtimes, same bytes, as a `git checkout` of another branch and back
leaves them). Each line gives the whole command (wall clock, the CLI's start included) and
the part inside the command (the CLI's own `seconds`, from the command's first line to its
answer: reading the suite, asking git, the requests). "CLI start" is the bare interpreter
plus every module a re-sync imports (``-X importtime``, summed, the imports made inside the
command included); "-start" is a step's seconds without it.

    uv run python benchmarks/sync.py [--cases 5000] [--fixtures 200] [--resyncs 3]

With ``--against DIR`` (a checkout of an older commit with its own ``.venv``, e.g. a
``git worktree``), the benchmark runs ``--rounds`` times in each tree, alternating old and
new, each on its own fresh server, and prints both trees' medians with the new/old ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PASSWORD = "bench-password-1"
TARGETS = {"first sync": 15.0, "no-change re-sync": 1.0}
STEPS = ("first sync", "no-change re-sync", "one case edited", "one fixture edited", "touched")
START = "CLI start"


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
        (suite / f"case-{n:05d}.yaml").write_text(case_text(n, fixtures))
    return suite


def case_text(n: int, fixtures: int, answer: str | None = None) -> str:
    files = f"\n  files: [f{(n // 5) % fixtures}]" if n % 5 == 0 else ""
    return (
        f"input:\n  question: What is {n} + {n}?{files}\n"
        f"expected:\n  answer: '{answer or 2 * n}'\n"
        f"tags: [arithmetic, t{n % 10}]\n"
        "evaluators:\n  exact_match: true\n  contains: ['" + str(2 * n) + "']\n"
    )


def timed_sync(
    suite: Path, env: dict[str, str], *python_flags: str
) -> tuple[float, float, dict[str, object], str]:
    """(wall seconds, seconds inside the command, the JSON answer, stderr)."""
    command = [sys.executable, *python_flags, "-c", "from evalkit.cli import main; main()"]
    command += ["sync", str(suite), "--branch", "bench", "--sha", "0" * 40, "--json"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sync failed: {done.stderr}")
    answer = json.loads(done.stdout)
    return elapsed, float(answer["seconds"]), answer, done.stderr


def cli_start(suite: Path, env: dict[str, str]) -> float:
    """What a no-change re-sync spends starting: the bare interpreter, plus every module it
    imports (``-X importtime``, summed; the imports inside the command included)."""
    bare_start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - bare_start
    _, _, _, stderr = timed_sync(suite, env, "-X", "importtime")
    micros = 0
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            self_us = line.removeprefix("import time:").split("|")[0].strip()
            if self_us.isdigit():
                micros += int(self_us)
    return bare + micros / 1e6


def run_once(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    """Every step on a fresh server; step -> [(wall, inside)], printed as it goes."""
    import httpx
    import psycopg

    from evalkit import serve
    from evalkit.auth.secrets import generate_key
    from evalkit.config import Settings
    from evalkit.embedded import EmbeddedPostgres
    from evalkit.sql import migrate

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    figures: dict[str, list[tuple[float, float]]] = {step: [] for step in (*STEPS, START)}
    try:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        db_url = urlunsplit(urlsplit(cluster.admin_url)._replace(path="/bench"))
        migrate.upgrade(db_url)
        settings = Settings(data_dir=str(work / "data"), encryption_key=generate_key())
        settings.server.port = serve.free_port()
        server = serve.ThreadedServer(settings, db_url, env={"EVALKIT_ADMIN_PASSWORD": PASSWORD})
        token = httpx.post(
            f"{server.url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        env = dict(
            os.environ,
            EVALKIT_SERVER_URL=server.url,
            EVALKIT_TOKEN=token,
            EVALKIT_CLI_CONFIG_DIR=str(work / "cli"),
            EVALKIT_CACHE_DIR=str(work / "cache"),
        )
        suite = write_suite(work / "repo", args.cases, args.fixtures)
        print(f"suite: {args.cases} cases, {args.fixtures} fixtures (1 MB); CLI in a subprocess")

        def step(name: str) -> None:
            wall, inside, answer, _ = timed_sync(suite, env)
            figures[name].append((wall, inside))
            counts = {k: answer[k] for k in ("unchanged", "known") if k in answer}
            changed = {k: len(answer[k]) for k in ("added", "changed") if answer[k]}
            print(f"  {name:<20}{wall:>7.2f} s  (inside {inside:.2f} s)  {changed} {counts}")

        step("first sync")
        for _ in range(args.resyncs):
            step("no-change re-sync")
        (suite / "case-00007.yaml").write_text(case_text(7, args.fixtures, answer="fourteen"))
        step("one case edited")
        fixture = work / "repo" / "fixtures" / "f3.bin"
        fixture.write_bytes(fixture.read_bytes()[::-1])
        step("one fixture edited")
        now = time.time()
        for path in suite.iterdir():
            os.utime(path, (now, now))
        step("touched")
        start = cli_start(suite, env)
        figures[START].append((start, start))
        print(f"  {START:<20}{start:>7.2f} s  (the interpreter and every import of a re-sync)")
        server.stop()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return figures


def print_table(figures: dict[str, list[tuple[float, float]]]) -> None:
    start = statistics.median(w for w, _ in figures[START])
    print(f"\n{'run':<22}{'seconds':>9}{'-start':>8}{'inside':>8}{'target':>9}{'ratio':>7}")
    for name in STEPS:
        wall = statistics.median(w for w, _ in figures[name])
        inside = statistics.median(i for _, i in figures[name])
        target = TARGETS.get(name)
        ratio = f"{wall / target:>7.2f}" if target else ""
        shown = f"{target:>8.0f}s" if target else " " * 9
        print(f"{name:<22}{wall:>9.2f}{wall - start:>8.2f}{inside:>8.2f}{shown}{ratio}")
    print(f"{START:<22}{start:>9.2f}   (-start: the seconds without it)")


def compare_trees(args: argparse.Namespace) -> None:
    """Alternate this script in ``args.against`` and in this tree, each on a fresh server."""
    old = args.against.resolve()
    new = Path(__file__).resolve().parents[1]
    passed = ["--cases", str(args.cases), "--fixtures", str(args.fixtures)]
    passed += ["--resyncs", str(args.resyncs), "--emit-json"]
    results: dict[str, dict[str, list[list[float]]]] = {"old": {}, "new": {}}
    for round_no in range(1, args.rounds + 1):
        for name, tree in (("old", old), ("new", new)):
            print(f"round {round_no}: {name} tree ({tree}), load {_load()}", flush=True)
            for step, runs in _one_run(tree, passed).items():
                results[name].setdefault(step, []).extend(runs)
    starts = {tree: statistics.median(w for w, _ in results[tree][START]) for tree in results}
    head = f"\n{'run':<22}{'old s':>8}{'new s':>8}{'new/old':>9}"
    print(head + f"{'old -start':>11}{'new -start':>11}{'old in':>8}{'new in':>8}")
    for step in STEPS:
        old_runs, new_runs = results["old"][step], results["new"][step]
        before = statistics.median(w for w, _ in old_runs)
        after = statistics.median(w for w, _ in new_runs)
        old_in = statistics.median(i for _, i in old_runs)
        new_in = statistics.median(i for _, i in new_runs)
        print(
            f"{step:<22}{before:>8.2f}{after:>8.2f}{after / before:>9.2f}"
            f"{before - starts['old']:>11.2f}{after - starts['new']:>11.2f}"
            f"{old_in:>8.2f}{new_in:>8.2f}"
        )
    print(f"{START:<22}{starts['old']:>8.2f}{starts['new']:>8.2f}")
    print(
        f"(medians of {args.rounds} alternating rounds; -start: without the CLI start, "
        f"'in': inside the command; {results})"
    )


def _one_run(tree: Path, passed: list[str]) -> dict[str, list[list[float]]]:
    """This script, run by ``tree``'s Python with ``tree``'s evalkit (CLI and server)."""
    from _stack import run_in_tree  # loads evalkit: only the parent that alternates trees

    stdout = run_in_tree(tree, Path(__file__).resolve(), passed)
    print("\n".join("   " + line for line in stdout.splitlines()[:-1]), flush=True)
    return json.loads(stdout.splitlines()[-1])  # type: ignore[no-any-return]


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 1)[0] if os.path.exists("/proc") else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--fixtures", type=int, default=200)
    parser.add_argument("--resyncs", type=int, default=3, help="no-change re-syncs per run")
    parser.add_argument("--against", type=Path, help="an older checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.against is not None:
        compare_trees(args)
        return
    figures = run_once(args)
    if args.emit_json:
        print(json.dumps(figures))
    else:
        print_table(figures)


if __name__ == "__main__":
    main()
