"""The settings evalkit gives its embedded PostgreSQL, on a cluster of the test's own."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from evalkit.embedded import EmbeddedPostgres


def setting_becomes(url: str, name: str, wanted: str, timeout: float = 10.0) -> str:
    """The setting as a new connection sees it, once it is ``wanted`` or ``timeout`` has
    passed (a reload reaches the server's processes a moment after it is asked for)."""
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT setting FROM pg_settings WHERE name = %s", [name]).fetchone()
        assert row is not None, f"PostgreSQL has no setting {name}"
        if row[0] == wanted or time.monotonic() > deadline:
            return str(row[0])
        time.sleep(0.05)


def test_a_new_cluster_gets_the_tuning_and_keeps_an_operators_own_value(tmp_path: Path) -> None:
    first = EmbeddedPostgres(tmp_path, cleanup="stop")
    url = first.start()
    try:
        assert setting_becomes(url, "wal_init_zero", "off") == "off"
        with psycopg.connect(first.admin_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET wal_init_zero = on")
            conn.execute("SELECT pg_reload_conf()")
        assert setting_becomes(url, "wal_init_zero", "on") == "on"
    finally:
        first.stop()

    again = EmbeddedPostgres(tmp_path, cleanup="delete")
    url = again.start()
    try:
        # ALTER SYSTEM writes the file before it returns: a start that overrode the
        # operator's value would show here at once
        settings = (again.pgdata / "postgresql.auto.conf").read_text()
        assert "wal_init_zero = 'on'" in settings
        assert "wal_init_zero = 'off'" not in settings
        assert setting_becomes(url, "wal_init_zero", "on", timeout=0) == "on"
    finally:
        again.stop()
