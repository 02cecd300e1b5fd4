"""What the load benchmarks share: an embedded PostgreSQL, evalkit's processes each in its
own OS process (so each one's memory is its own), and what they watch while load runs:
resident memory of each process, database connections per process, procrastinate's queue,
and the error lines each process logged.

Each process connects with its own ``application_name`` (libpq's ``PGAPPNAME``), so the
connections it holds can be told apart in ``pg_stat_activity``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from _stack import migrated_database, wait_http

from evalkit import serve
from evalkit.auth.secrets import generate_key
from evalkit.embedded import EmbeddedPostgres

PASSWORD = "bench-password-1"
EVALKIT = [sys.executable, "-c", "from evalkit.cli import main; main()"]


def machine() -> str:
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {one:.2f} (5 min {five:.2f})"


def memory_mb(pid: int) -> tuple[float, float]:
    """Current and peak resident memory (VmRSS, VmHWM) of a process, in MB."""
    now = peak = float("nan")
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return now, peak


@dataclass
class Process:
    name: str
    """Also its application_name in pg_stat_activity."""
    popen: subprocess.Popen[bytes]
    log: Path

    def error_lines(self) -> list[str]:
        """Lines of its log that report an error or a traceback."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return []
        return [
            line
            for line in text.splitlines()
            if "ERROR" in line or "Traceback" in line or "CRITICAL" in line
        ]


@dataclass
class Stack:
    work: Path
    cluster: EmbeddedPostgres
    db_url: str
    env: dict[str, str]
    processes: list[Process] = field(default_factory=list)
    url: str = ""

    def spawn(self, name: str, args: list[str], **extra_env: str) -> Process:
        log = self.work / f"{name}.log"
        env = dict(self.env, PGAPPNAME=name, **extra_env)
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [*EVALKIT, *args], env=env, stdout=subprocess.DEVNULL, stderr=out
            )
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def start_edge(self, *, worker: bool = False) -> Process:
        port = serve.free_port()
        edge = self.spawn(
            "edge", ["server", "--port", str(port), "--with-worker" if worker else "--no-worker"]
        )
        self.url = f"http://127.0.0.1:{port}"
        wait_http(self.url + "/healthz")
        return edge

    def admin_token(self) -> str:
        answer = httpx.post(
            f"{self.url}/api/auth/login",
            json={"username": "admin", "password": PASSWORD},
            timeout=60,
        )
        answer.raise_for_status()
        return str(answer.json()["token"])

    def query(self, sql: str, params: object = None) -> list[tuple]:
        with psycopg.connect(self.db_url, autocommit=True, application_name="bench") as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


@contextmanager
def load_stack(**env: str) -> Iterator[Stack]:
    """An embedded PostgreSQL with a migrated database `bench`; processes started with
    :meth:`Stack.spawn` are stopped (then killed) and the cluster removed on the way out."""
    with migrated_database("evalkit-load-") as (work, cluster, db_url):
        stack = None
        try:
            stack = Stack(
                work=work,
                cluster=cluster,
                db_url=db_url,
                env=dict(
                    os.environ,
                    EVALKIT_DATABASE_URL=db_url,
                    EVALKIT_ENCRYPTION_KEY=generate_key(),
                    EVALKIT_DATA_DIR=str(work / "data"),
                    EVALKIT_ADMIN_PASSWORD=PASSWORD,
                    EVALKIT_EGRESS_ALLOW_PRIVATE="true",
                    **env,
                ),
            )
            yield stack
        finally:
            if stack is not None:
                for process in stack.processes:
                    if process.popen.poll() is None:
                        process.popen.terminate()
                for process in stack.processes:
                    try:
                        process.popen.wait(15)
                    except subprocess.TimeoutExpired:
                        process.popen.kill()
                        process.popen.wait(5)


class Watch:
    """Samples, every ``every`` seconds on a thread: each process's resident memory, the
    database connections each one holds (by application_name), and procrastinate's jobs by
    status. Keeps the peaks and the whole series."""

    def __init__(self, stack: Stack, every: float = 0.5) -> None:
        self.stack = stack
        self.every = every
        self.rss: dict[str, list[tuple[float, float]]] = {p.name: [] for p in stack.processes}
        self.connections: dict[str, int] = {}
        """Peak connections per application_name (bench's own excluded)."""
        self.total_connections = 0
        self.jobs: dict[str, int] = {}
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        try:
            with psycopg.connect(
                self.stack.db_url, autocommit=True, application_name="bench"
            ) as conn:
                while not self._stop.is_set():
                    self.sample(conn)
                    self._stop.wait(self.every)
        except Exception as exc:  # the benchmark reports it; the watch must not hang it
            self.failures.append(f"watch stopped: {exc}")

    def sample(self, conn: psycopg.Connection) -> None:
        at = time.monotonic() - self.started
        for process in self.stack.processes:
            now, _ = memory_mb(process.popen.pid)
            self.rss.setdefault(process.name, []).append((at, now))
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = 'bench' AND backend_type = 'client backend' "
            "AND application_name <> 'bench' GROUP BY 1"
        ).fetchall()
        total = 0
        for name, count in rows:
            total += count
            self.connections[name or "?"] = max(self.connections.get(name or "?", 0), count)
        self.total_connections = max(self.total_connections, total)

    def rss_at(self, name: str, index: int) -> float:
        series = self.rss.get(name) or [(0.0, float("nan"))]
        return series[index][1]


def jobs_by_status(stack: Stack) -> dict[str, int]:
    return {
        status: count
        for status, count in stack.query(
            "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1"
        )
    }


def percentile(ordered: list[float], fraction: float) -> float:
    """The value at ``fraction`` of a sorted list (nearest rank)."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def report_found(problems: list[str]) -> None:
    """End the run: when anything went wrong, list it under ``FOUND:`` and exit 1."""
    if problems:
        print("\nFOUND:")
        for problem in problems:
            print(f"  {problem}")
        raise SystemExit(1)
