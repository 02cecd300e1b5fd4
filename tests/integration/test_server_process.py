"""The real `evalkit server`, `worker` and `db` commands as separate processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import psycopg

from tests.conftest import free_port

EVALKIT = str(Path(sys.executable).parent / "evalkit")


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    base.update(extra)
    return base


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.communicate()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("server did not become ready")


def postgres_running_in(data_dir: Path) -> bool:
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir) in " ".join(
            proc.info["cmdline"] or []
        ):
            return True
    return False


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([EVALKIT, *args], capture_output=True, text=True, timeout=120, **kw)


def test_embedded_default_serves_and_stops_cleanly(tmp_path):
    data = tmp_path / "data"
    port = free_port()
    proc = subprocess.Popen(
        [EVALKIT, "server", "--data-dir", str(data), "--port", str(port)],
        env=env(EVALKIT_ADMIN_PASSWORD="first-admin-pw"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        assert postgres_running_in(data)
        login = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": "first-admin-pw"}
        )
        assert login.status_code == 200
        assert (data / "encryption.key").stat().st_mode & 0o777 == 0o600
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"serving on {url}" in err
    assert "created admin user 'admin'" in err
    assert not postgres_running_in(data), "the embedded PostgreSQL was left running"

    # A second start reuses the data: no password needed any more, admin still there.
    port = free_port()
    proc = subprocess.Popen(
        [EVALKIT, "server", "--data-dir", str(data), "--port", str(port)],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_first_start_without_admin_password_refuses(tmp_path):
    result = run("server", "--data-dir", str(tmp_path), "--port", str(free_port()), env=env())
    assert result.returncode == 1
    assert "no admin yet: set EVALKIT_ADMIN_PASSWORD" in result.stderr
    assert not postgres_running_in(tmp_path)


def test_first_start_with_bad_admin_password_refuses(tmp_path):
    short = run(
        "server",
        "--data-dir",
        str(tmp_path),
        "--port",
        str(free_port()),
        env=env(EVALKIT_ADMIN_PASSWORD="short"),
    )
    assert short.returncode == 1
    assert "EVALKIT_ADMIN_PASSWORD is 5 characters long; use at least 8" in short.stderr
    long = run(
        "server",
        "--data-dir",
        str(tmp_path),
        "--port",
        str(free_port()),
        env=env(EVALKIT_ADMIN_PASSWORD="x" * 73),
    )
    assert long.returncode == 1
    assert "73 bytes long; use at most 72 bytes" in long.stderr


def test_external_database_must_be_migrated_first(new_database, tmp_path):
    url = new_database(template=False)
    key = "A" * 43 + "="
    server_env = env(
        EVALKIT_DATABASE_URL=url,
        EVALKIT_ADMIN_PASSWORD="first-admin-pw",
        EVALKIT_ENCRYPTION_KEY=key,
    )
    refused = run("server", "--port", str(free_port()), env=server_env)
    assert refused.returncode == 1
    assert "has no evalkit schema yet; run `evalkit db upgrade`" in refused.stderr

    status = run("db", "status", "--json", env=server_env)
    assert status.returncode == 1 and '"up_to_date": false' in status.stdout

    upgraded = run("db", "upgrade", env=server_env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.startswith("database migrated from empty to ")
    again = run("db", "upgrade", env=server_env)
    assert again.stdout.startswith("database already at revision")
    assert run("db", "status", env=server_env).returncode == 0

    no_key = run(
        "server",
        "--port",
        str(free_port()),
        env=env(EVALKIT_DATABASE_URL=url, EVALKIT_ADMIN_PASSWORD="first-admin-pw"),
    )
    assert no_key.returncode == 1
    assert "encryption_key is not set" in no_key.stderr


def test_stale_or_newer_schema_refuses(new_database):
    url = new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    server_env = env(EVALKIT_DATABASE_URL=url, EVALKIT_ENCRYPTION_KEY="A" * 43 + "=")
    behind = run("server", "--port", str(free_port()), env=server_env)
    assert behind.returncode == 1
    assert "is at revision 0001, this evalkit needs" in behind.stderr
    assert "run `evalkit db upgrade`" in behind.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00d'")
    ahead = run("server", "--port", str(free_port()), env=server_env)
    assert ahead.returncode == 1 and "migrated by a newer version" in ahead.stderr


def test_port_in_use_is_explained(tmp_path, new_database):
    import socket

    url = new_database()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(
            "server",
            "--port",
            str(port),
            env=env(
                EVALKIT_DATABASE_URL=url,
                EVALKIT_ENCRYPTION_KEY="A" * 43 + "=",
                EVALKIT_ADMIN_PASSWORD="first-admin-pw",
            ),
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr


def test_malformed_config_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  prot: 1\n")
    result = run("server", "--config", str(config), env=env())
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"evalkit: error: {config}: unknown key 'server.prot'; remove it or check its "
        "spelling (see docs/config.md)"
    )
    config.write_text("mcp:\n  oauth:\n    issuer: https://idp\n")
    moved = run("db", "status", env=env(EVALKIT_CONFIG=str(config)))
    assert (
        moved.returncode == 1 and "move the issuer" in moved.stderr and "auth.oidc" in moved.stderr
    )
