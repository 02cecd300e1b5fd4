"""`evalkit worker` starts on every deploy and restart: what it imports is paid each time.

It drives runs and scores them; it serves no HTTP. A count of what it loads is stable where
a time is not (benchmarks/README.md, run_engine.py, has the times).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from evalkit.auth.secrets import generate_key

EDGE = ("starlette", "uvicorn", "jinja2", "joserfc", "evalkit.edge.app", "evalkit.web")
"""The HTTP edge and what only it needs: the web pages' templates, the OIDC login."""

PROBE = """
import atexit, json, sys

def report():
    passwords = sys.modules.get("evalkit.auth.passwords")
    hashed = passwords is not None and passwords.stand_in_hash.cache_info().currsize > 0
    with open({report!r}, "w") as f:
        json.dump({{"modules": [n for n, m in sys.modules.items() if m is not None],
                   "stand_in_hashed": hashed}}, f)

atexit.register(report)
from evalkit.cli import main
sys.argv = ["evalkit", "worker"]
main()
"""


def test_the_worker_loads_no_part_of_the_edge_and_hashes_nothing(database_url, tmp_path):
    """A real worker against a real database, from its start until it has registered with
    the job queue (it takes jobs from then on), then stopped by SIGTERM as a deploy does."""
    report = tmp_path / "worker-modules.json"
    env = dict(
        os.environ,
        EVALKIT_DATABASE_URL=database_url,
        EVALKIT_ENCRYPTION_KEY=generate_key(),
        EVALKIT_DATA_DIR=str(tmp_path / "data"),
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", PROBE.format(report=str(report))],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until_registered(database_url, worker)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    found = json.loads(report.read_text())
    assert not set(EDGE) & set(found["modules"]), "the worker loaded the edge"
    assert "procrastinate" in found["modules"]  # it did start the job worker
    assert not found["stand_in_hashed"], "the worker hashed a password it will never verify"


def _until_registered(database_url: str, worker: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    with psycopg.connect(database_url, autocommit=True) as conn:
        while not conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()[0]:
            assert worker.poll() is None, f"the worker exited: {worker.stderr.read()}"
            assert time.monotonic() < deadline, "the worker did not register within 60 s"
            time.sleep(0.05)


def test_the_edge_makes_the_stand_in_hash_at_start():
    """An unknown user's login verifies against the stand-in hash: made when the edge is
    created, the first such login costs what the next does."""
    from evalkit.auth import passwords
    from evalkit.config import Settings
    from evalkit.db import Database
    from evalkit.edge.app import create_app

    passwords.stand_in_hash.cache_clear()
    create_app(Settings(data_dir=str(Path("/nonexistent"))), Database("postgresql://"))
    assert passwords.stand_in_hash.cache_info().currsize == 1
    assert not passwords.verify_password(None, "any password at all")
