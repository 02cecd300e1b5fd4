"""SDK benchmark: run_experiment over 1,000 cases with an instant task and one Python
evaluator, at concurrency 8.

Starts an embedded PostgreSQL, the edge (`evalkit server --no-worker`) and one worker
(`evalkit worker`), each in its own process, syncs a dataset of 1,000 cases that select
the built-in exact_match and the Python evaluator, creates a code-driven agent, then times
`run_experiment(...)` in this process from the call to the returned result: every run
claimed, reported, scored (exact_match by the server, is_even by the Python evaluator)
and the experiment finished.

Besides runs/s it prints what a run costs: the SDK's requests (counted in this process,
by route), PostgreSQL's transactions (pg_stat_database, committed and rolled back: every
statement sent outside an explicit transaction counts once, so it is close to the round
trips) and the CPU seconds of each process (this one, the edge, the worker, PostgreSQL's
backends), read from /proc, which a loaded machine stretches less than wall time.

    uv run python benchmarks/sdk_experiment.py [--cases 1000] [--concurrency 8]
        [--profile FILE.html] [--spy-edge FILE.svg] [--spy-worker FILE.svg]

``--profile`` records the benchmark's own process (the SDK) with pyinstrument;
``--spy-edge`` / ``--spy-worker`` record the edge's or the worker's process with py-spy
(a flame graph for .svg, collapsed stacks otherwise). Neither tool is a dependency of
evalkit: ``uv pip install pyinstrument py-spy`` first.

With ``--against DIR`` (another checkout, e.g. ``git archive main | tar -x -C DIR``; its
own ``.venv`` if it has one, else this interpreter, with ``PYTHONPATH`` set to it), the
benchmark runs ``--rounds`` times in each tree, alternating old and new (old, new, new,
old, ...), each on its own fresh database and processes, and prints the medians with the
new/old ratios and the load average before each round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).parent))

PASSWORD = "bench-password-1"
TARGET_RUNS_PER_SECOND = 250.0
EVALKIT = [sys.executable, "-c", "from evalkit.cli import main; main()"]
FIGURES = ("runs/s", "tx/run", "requests/run", "sdk cpu", "edge cpu", "worker cpu", "pg cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--profile", type=Path, help="write a pyinstrument profile (HTML)")
    parser.add_argument("--spy-edge", type=Path, help="py-spy the edge: a flame graph (SVG)")
    parser.add_argument("--spy-worker", type=Path, help="py-spy the worker: a flame graph")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
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
        print_figures(figures, args.cases)


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    import httpx
    import psycopg
    from _stack import wait_http

    import evalkit
    from evalkit import serve
    from evalkit.auth.secrets import generate_key
    from evalkit.embedded import EmbeddedPostgres
    from evalkit.otel.mapping import load_starter
    from evalkit.sql import migrate

    print(f"evalkit from {Path(evalkit.__file__).parent}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="evalkit-sdk-bench-"))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    children: list[subprocess.Popen[bytes]] = []
    spies: list[subprocess.Popen[bytes]] = []
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
            edge = subprocess.Popen(
                [*EVALKIT, "server", "--no-worker", "--port", str(port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            children.append(edge)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", log=edge_log)
        worker = subprocess.Popen(
            [*EVALKIT, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        children.append(worker)
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

        _wait_for_worker(db_url)  # its start (imports) would otherwise count in the run
        os.environ["EVALKIT_SERVER_URL"] = url
        os.environ["EVALKIT_TOKEN"] = token
        os.environ["EVALKIT_CLI_CONFIG_DIR"] = str(work / "cli")
        os.chdir(work)  # no evalkit.yaml here: the dataset is the server's
        from evalkit.sdk import evaluator, run_experiment

        @evaluator(name="is_even")
        def is_even(case: Any, run: Any) -> float:
            return 1.0 if int(run.answer or "1") % 2 == 0 else 0.0

        def task(input: dict[str, Any]) -> str:
            a, _, b = input["question"].removeprefix("What is ").rstrip("?").partition(" + ")
            return str(int(a) + int(b))

        print(
            f"{args.cases} cases, an instant task, one Python evaluator, concurrency "
            f"{args.concurrency}; edge and worker (concurrency {args.worker_concurrency}) in "
            f"their own processes; this machine: {os.cpu_count()} cores; load {_load()}",
            flush=True,
        )
        requests = _count_requests()
        for path, pid in ((args.spy_edge, edge.pid), (args.spy_worker, worker.pid)):
            if path is not None:
                spies.append(_spy(pid, path))
        profiler = None
        if args.profile is not None:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.001, async_mode="disabled")
            profiler.start()
        postmaster = _postmaster_pid(cluster.pgdata)
        cpu_before = _cpu(edge.pid, worker.pid, postmaster)
        tx_before = _transactions(cluster.admin_url)
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
        cpu = {k: v - cpu_before[k] for k, v in _cpu(edge.pid, worker.pid, postmaster).items()}
        spent = _transactions(cluster.admin_url) - tx_before
        if profiler is not None:
            profiler.stop()
            args.profile.write_text(profiler.output_html())
            print(profiler.output_text(unicode=True, color=False, show_all=False))
        if result.by_state != {"done": args.cases}:
            raise SystemExit(f"expected {args.cases} runs done, got {result.by_state}")
        means = {s["name"]: s["mean"] for s in result.scores}
        if means.get("is_even") != 1.0 or means.get("exact_match") != 1.0:
            raise SystemExit(f"unexpected scores: {means}")
        n = args.cases
        return {
            "seconds": elapsed,
            "runs/s": n / elapsed,
            "tx/run": spent / n,
            "requests/run": sum(requests.values()) / n,
            "requests": dict(requests),
            **{f"{name} cpu": seconds / n * 1000 for name, seconds in cpu.items()},
        }
    finally:
        for spy in spies:
            spy.send_signal(2)  # py-spy writes its graph on SIGINT
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        cluster.stop()
        _say_errors(work / "edge.log")
        shutil.rmtree(work, ignore_errors=True)


def _say_errors(log: Path) -> None:
    """The edge's logged errors, if any (a refused batch is retried by the SDK, so a run
    can succeed slowly through them)."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    errors = [line for line in lines if "ERROR" in line or "rror:" in line]
    if errors:
        print(f"the edge logged {len(errors)} errors; the first: {errors[:3]}", file=sys.stderr)


def _count_requests() -> Counter[str]:
    """Count the SDK's requests by route (the experiment's id and run ids as ``N``)."""
    import re

    from evalkit.runs.local import ServerLink

    counts: Counter[str] = Counter()
    send = ServerLink._send

    async def counted(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        route = re.sub(r"/\d+", "/N", path.split("?")[0])
        counts[f"{method} {route}"] += 1
        return await send(self, method, path, **kwargs)

    ServerLink._send = counted  # type: ignore[method-assign]
    return counts


def _spy(pid: int, path: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [spy, "record", "--pid", str(pid), "--output", str(path), "--rate", "100"]
    if path.suffix != ".svg":
        command += ["--format", "raw"]  # collapsed stacks, one a line
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_worker(db_url: str, timeout: float = 120) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as conn:
        while not conn.execute("SELECT 1 FROM procrastinate_workers").fetchone():
            if time.monotonic() > deadline:
                raise SystemExit(f"the worker did not register within {timeout:.0f} s")
            time.sleep(0.1)
    time.sleep(1.0)  # its first sweeps, after it registered


def _transactions(admin_url: str) -> int:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'bench'"
        ).fetchone()
    return int(row[0]) if row else 0


def _postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def _cpu(edge: int, worker: int, postmaster: int) -> dict[str, float]:
    """CPU seconds so far of this process, the edge, the worker and PostgreSQL (the
    postmaster's children alive now, and what its ended children used)."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid: int) -> list[str]:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rindex(")") + 2 :].split()

    def own(pid: int) -> float:
        fields = stat(pid)
        return (int(fields[11]) + int(fields[12])) / tick

    pg = sum(int(f) for f in stat(postmaster)[11:15]) / tick  # its own and its dead children's
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = stat(int(entry.name))
            except (OSError, ValueError):
                continue
            if int(fields[1]) == postmaster:
                pg += (int(fields[11]) + int(fields[12])) / tick
    return {"sdk": time.process_time(), "edge": own(edge), "worker": own(worker), "pg": pg}


def print_figures(figures: dict[str, Any], cases: int) -> None:
    rate = figures["runs/s"]
    print(f"\n{'runs':>6}{'seconds':>9}{'runs/s':>9}{'vs 250/s':>10}{'tx/run':>8}{'req/run':>9}")
    print(
        f"{cases:>6}{figures['seconds']:>9.2f}{rate:>9.1f}{rate / TARGET_RUNS_PER_SECOND:>10.2f}"
        f"{figures['tx/run']:>8.2f}{figures['requests/run']:>9.3f}"
    )
    cpu = ", ".join(f"{k.split()[0]} {figures[k]:.2f}" for k in FIGURES if k.endswith("cpu"))
    print(f"CPU ms per run: {cpu}")
    print(f"requests: {figures['requests']}")


def compare_trees(args: argparse.Namespace) -> None:
    """Alternate this script in ``args.against`` and in this tree, each on a fresh stack."""
    from _stack import run_in_tree

    old = args.against.resolve()
    new = Path(__file__).resolve().parents[1]
    passed = ["--cases", str(args.cases), "--concurrency", str(args.concurrency)]
    passed += ["--worker-concurrency", str(args.worker_concurrency), "--emit-json"]
    results: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    order = [("old", old), ("new", new)]
    for round_no in range(1, args.rounds + 1):
        for name, tree in order if round_no % 2 else order[::-1]:
            print(f"round {round_no}: {name} tree ({tree}), load {_load()}", flush=True)
            stdout = run_in_tree(tree, Path(__file__).resolve(), passed)
            print("\n".join("   " + line for line in stdout.splitlines()[:-1]), flush=True)
            figures = json.loads(stdout.splitlines()[-1])
            results[name].append(figures)
            print(f"   {figures['runs/s']:.1f} runs/s, {figures['tx/run']:.2f} tx/run", flush=True)
    print(f"\n{'':<14}{'old':>9}{'new':>9}{'new/old':>9}   (medians of {args.rounds} rounds)")
    for figure in FIGURES:
        before = statistics.median(r[figure] for r in results["old"])
        after = statistics.median(r[figure] for r in results["new"])
        print(f"{figure:<14}{before:>9.2f}{after:>9.2f}{after / before:>9.2f}")
    for name in ("old", "new"):
        rates = ", ".join(f"{r['runs/s']:.1f}" for r in results[name])
        print(f"{name} runs/s: {rates}")
    print(f"load average now: {Path('/proc/loadavg').read_text().strip()}")


def _load() -> str:
    return Path("/proc/loadavg").read_text().strip() if os.path.exists("/proc") else "?"


if __name__ == "__main__":
    main()
