"""A whole evalkit on one machine for the engine benchmarks: an embedded PostgreSQL, the
edge on loopback (in the caller's process), the reference harness answering at once and
one worker (each in its own process), an admin API client and a shared workspace `bench`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass
class Stack:
    api: httpx.Client
    """Logged in as admin, on the edge."""
    harness_url: str
    admin_url: str
    """The PostgreSQL cluster's admin URL (for its counters)."""
    pids: dict[str, int]
    """The worker's and the harness's process ids, and PostgreSQL's postmaster's."""

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) spent so far by each part: ``edge`` is this process
        (the edge's thread and the benchmark's own client), ``postgres`` the postmaster
        with every backend, live or ended."""
        spent = {name: process_tree_cpu(pid) for name, pid in self.pids.items()}
        spent["edge"] = process_tree_cpu(os.getpid(), children=False)
        return spent

    def transactions(self) -> int:
        """PostgreSQL's committed and rolled back transactions of the bench database: every
        statement outside an explicit transaction counts once, so differences are a close
        count of round trips."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'bench'"
            ).fetchone()
        return int(row[0]) if row else 0


_TICK = os.sysconf("SC_CLK_TCK")


def process_tree_cpu(root: int, *, children: bool = True) -> float:
    """Seconds of CPU of ``root`` and, with ``children``, of its live descendants and of
    the children it has reaped (Linux /proc)."""
    parents: dict[int, int] = {}
    times: dict[int, tuple[float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        own = (int(fields[11]) + int(fields[12])) / _TICK
        reaped = (int(fields[13]) + int(fields[14])) / _TICK
        times[int(entry)] = (own, reaped)
    if root not in times:
        return 0.0
    if not children:
        return times[root][0]
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(times[pid][0] for pid in tree) + times[root][1]


def postmaster_pid(pgdata: Path) -> int:
    """The postmaster's pid, from the first line of ``postmaster.pid``."""
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def wait_http(url: str, timeout: float = 120, log: Path | None = None) -> None:
    """Until ``url`` answers 2xx; on timeout, exit naming it (and the end of ``log``, the
    log of the process that should answer, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
                ending = f"; its log ends:\n{tail}" if tail else ""
                raise SystemExit(f"{url} did not come up within {timeout:.0f} s{ending}") from None
            time.sleep(0.1)


def wait_worker(db_url: str, worker: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Until the worker has registered with the job queue (it takes jobs from then on); on
    timeout or the worker's exit, exit saying so. Without this wait the first experiment
    timed would include the worker's own start (seconds where bytecode is not cached)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
            if row and row[0] > 0:
                return
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited with {worker.returncode} before it started")
            if time.monotonic() > deadline:
                raise SystemExit(f"the worker did not register within {timeout:.0f} s")
            time.sleep(0.05)


@contextmanager
def migrated_database(
    prefix: str = "evalkit-bench-",
) -> Iterator[tuple[Path, EmbeddedPostgres, str]]:
    """(work dir, cluster, url): an embedded PostgreSQL in a new temporary directory with a
    database `bench` migrated to head; stopped and the directory removed on the way out."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = EmbeddedPostgres(work / "pg", cleanup="delete")
    cluster.start()
    try:
        with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        db_url = urlunsplit(urlsplit(cluster.admin_url)._replace(path="/bench"))
        migrate.upgrade(db_url)
        yield work, cluster, db_url
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def local_stack(worker_concurrency: int) -> Iterator[Stack]:
    with migrated_database("evalkit-bench-") as (work, cluster, db_url):
        children: list[subprocess.Popen[bytes]] = []
        server = None
        try:
            key = generate_key()
            settings = Settings(data_dir=str(work / "data"), encryption_key=key)
            settings.server.port = serve.free_port()
            settings.egress.allow_private = True
            server = serve.ThreadedServer(
                settings, db_url, env={"EVALKIT_ADMIN_PASSWORD": PASSWORD}
            )

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
                EVALKIT_WORKER_CONCURRENCY=str(worker_concurrency),
            )
            children.append(
                subprocess.Popen([*EVALKIT, "worker"], env=worker_env, stderr=subprocess.DEVNULL)
            )
            wait_worker(db_url, children[1])
            token = httpx.post(
                f"{server.url}/api/auth/login", json={"username": "admin", "password": PASSWORD}
            ).json()["token"]
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
            ) as api:
                api.post("/api/workspaces", json={"name": "bench"}).raise_for_status()
                pids = {
                    "worker": children[1].pid,
                    "harness": children[0].pid,
                    "postgres": postmaster_pid(cluster.pgdata),
                }
                yield Stack(
                    api=api, harness_url=harness_url, admin_url=cluster.admin_url, pids=pids
                )
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


def run_in_tree(tree: Path, script: Path, passed: list[str]) -> str:
    """Run ``script`` with ``tree``'s Python (this one when the tree has no ``.venv``, as
    an unpacked ``git archive`` has not) and ``tree``'s evalkit (for ``--against``): its
    stdout, or exit with what it printed when it failed."""
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python) if python.exists() else sys.executable, str(script), *passed],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the benchmark failed in {tree}:\n{done.stdout}\n{done.stderr}")
    return done.stdout
