"""Worker takeover benchmark: how long the jobs of a killed worker wait for a restarted one.

Starts an embedded PostgreSQL and, per sample, a real ``evalkit worker`` (its own process)
that holds one running job (a job row marked ``doing`` under its worker id, as a job in the
middle of a harness call would be), kills it with SIGKILL, starts a second worker at once
(as a supervisor would) and times, from the kill, the second worker's registration and the
moment the dead worker's job is put back in the queue (it leaves ``doing``).

    uv run python benchmarks/worker_takeover.py [--samples 3] [--stalled 60]

With ``--against DIR`` (a checkout of an older commit; its ``.venv`` when it has one, else
this interpreter with ``PYTHONPATH=DIR``), samples alternate old and new tree on the same
database and the medians are printed side by side.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from _stack import migrated_database

from evalkit.auth.secrets import generate_key

HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="per tree")
    parser.add_argument("--stalled", type=float, default=60.0, help="worker.stalled_seconds")
    parser.add_argument("--against", type=Path, help="an older checkout to compare with")
    args = parser.parse_args()
    trees = {"new": HERE} if args.against is None else {"old": args.against.resolve(), "new": HERE}
    key = generate_key()
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    with migrated_database("evalkit-bench-takeover-") as (work, _, url):
        print(f"load average before: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        for sample in range(1, args.samples + 1):
            for name, tree in trees.items():
                registered, taken = one_sample(tree, url, key, work, args.stalled)
                found[name].append((registered, taken))
                print(
                    f"sample {sample} {name}: second worker registered {registered:.2f} s "
                    f"after the kill, the dead worker's job taken back {taken:.2f} s after it",
                    flush=True,
                )
        print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    print(f"\n{'tree':>6}{'registered (s)':>16}{'taken back (s)':>16}   (medians after the kill)")
    for name, samples in found.items():
        registered = statistics.median(s[0] for s in samples)
        taken = statistics.median(s[1] for s in samples)
        print(f"{name:>6}{registered:>16.2f}{taken:>16.2f}")
    if "old" in found:
        old = statistics.median(s[1] for s in found["old"])
        new = statistics.median(s[1] for s in found["new"])
        print(f"taken back, new/old: {new / old:.2f}")


def one_sample(tree: Path, url: str, key: str, work: Path, stalled: float) -> tuple[float, float]:
    """(seconds from the kill to the second worker's registration, to the job's retry)."""
    first = start_worker(tree, url, key, work, stalled)
    try:
        dead_id = wait_registered(url, first)
        time.sleep(2)  # past its start-up: the liveness lock is held, a heartbeat was sent
        job_id = running_job(url, dead_id)
        first.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        first.wait(timeout=30)
        second = start_worker(tree, url, key, work, stalled)
        try:
            wait_registered(url, second, after=dead_id)
            registered = time.monotonic() - killed
            while job_status(url, job_id) == "doing":
                if time.monotonic() - killed > stalled + 120:
                    raise SystemExit(f"job {job_id} still doing {stalled + 120:.0f} s after")
                time.sleep(0.05)
            return registered, time.monotonic() - killed
        finally:
            second.send_signal(signal.SIGKILL)
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        with psycopg.connect(url, autocommit=True) as conn:  # the next sample starts clean
            conn.execute("DELETE FROM procrastinate_jobs")
            conn.execute("DELETE FROM procrastinate_workers")


def start_worker(
    tree: Path, url: str, key: str, work: Path, stalled: float
) -> subprocess.Popen[bytes]:
    venv_python = tree / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update(
        PYTHONPATH=str(tree),
        EVALKIT_DATABASE_URL=url,
        EVALKIT_ENCRYPTION_KEY=key,
        EVALKIT_DATA_DIR=str(work / "data"),
        EVALKIT_WORKER_STALLED_SECONDS=str(stalled),
    )
    log = (work / "worker.log").open("ab")
    return subprocess.Popen(
        [python, "-c", "from evalkit.cli import main; main()", "worker"],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_registered(url: str, proc: subprocess.Popen[bytes], after: int = 0) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the worker exited with {proc.returncode}")
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT max(id) FROM procrastinate_workers WHERE id > %s", (after,)
            ).fetchone()
        if row and row[0] is not None:
            return int(row[0])
        time.sleep(0.05)
    raise SystemExit("the worker did not register within 120 s")


def running_job(url: str, worker_id: int) -> int:
    """A harmless job marked as running under ``worker_id``."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, worker_id) "
            "VALUES ('default', 'delete_stale_login_tokens', '{\"timestamp\": 0}', 'doing', %s) "
            "RETURNING id",
            (worker_id,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def job_status(url: str, job_id: int) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT status::text FROM procrastinate_jobs WHERE id = %s", (job_id,)
        ).fetchone()
    return str(row[0]) if row else "deleted"


if __name__ == "__main__":
    main()
