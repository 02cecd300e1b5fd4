"""`evalkit init-server` as an operator runs it (subprocesses): the config it writes is all
`evalkit server --config PATH` needs, the admin it creates logs in, and it refuses to
clobber a config or to start on bad input before touching anything."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evalkit.config import load_settings
from tests.conftest import free_port
from tests.integration.test_server_process import EVALKIT, env, postgres_running_in, wait_ready


def init(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EVALKIT, "init-server", *args],
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=180,
    )


def serve_and_login(config: Path, password: str) -> str:
    """Start `evalkit server --config` with no EVALKIT_* variable at all (the port flag only
    because other test sessions share this machine), log in as admin, stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [EVALKIT, "server", "--config", str(config), "--port", str(port)],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(url, proc)
        login = httpx.post(
            f"{url}/api/auth/login", json={"username": "admin", "password": password}
        )
        assert login.status_code == 200, login.text
        me = httpx.get(
            f"{url}/api/auth/whoami",
            headers={"Authorization": f"Bearer {login.json()['token']}"},
        )
        assert me.status_code == 200 and me.json()["user"]["is_admin"] is True, me.text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "created admin user" not in err  # init-server made it; the server did not need to
    return err


@pytest.fixture
def scratch() -> Iterator[Path]:
    """Not under pytest's basetemp: run as root, the embedded PostgreSQL needs its parents
    traversable, and a concurrent pytest session resets basetemp's parent to 0700."""
    path = Path(tempfile.mkdtemp(prefix="evalkit-init-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_embedded_init_then_the_server_starts_from_the_config_alone(scratch):
    config, data = scratch / "etc" / "config.yaml", scratch / "data"
    config.parent.mkdir()
    first = init("--config", str(config), "--data-dir", str(data), "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["config"] == str(config) and out["data_dir"] == str(data)
    assert out["database"] == "embedded" and out["encryption_key"] == "generated"
    assert out["schema"]["before"] is None and out["schema"]["after"]
    admin = out["admin"]
    assert admin["created"] is True and admin["password_from"] is None
    password = admin["password"]
    assert len(password) >= 16
    assert out["start"] == f"evalkit server --config {config}"

    assert config.stat().st_mode & 0o777 == 0o600
    settings = load_settings(config, env={})
    assert settings.data_dir == str(data) and settings.database.url is None
    assert len(base64.b64decode(settings.encryption_key, validate=True)) == 32
    # The embedded server's own key file holds the same key, so starting with --data-dir
    # and no config would not make secrets unreadable.
    assert (data / "encryption.key").read_text() == settings.encryption_key
    assert (data / "encryption.key").stat().st_mode & 0o777 == 0o600
    assert password not in config.read_text()
    assert not postgres_running_in(data), "init-server left the embedded PostgreSQL running"

    err = serve_and_login(config, password)
    assert "embedded PostgreSQL in" in err
    assert not postgres_running_in(data)

    # Again with --force: the key and the admin are kept, nothing is printed as a password.
    again = init("--config", str(config), "--data-dir", str(data), "--force")
    assert again.returncode == 0, again.stderr
    assert "encryption_key kept from the old config.yaml" in again.stdout
    assert "database already at revision" in again.stdout
    assert "an admin already exists in this database; kept it" in again.stdout
    assert load_settings(config, env={}).encryption_key == settings.encryption_key
    serve_and_login(config, password)


def test_external_database_with_the_password_from_a_variable(tmp_path, new_database):
    url = new_database(template=False)
    config = tmp_path / "config.yaml"
    result = init(
        "--config",
        str(config),
        "--data-dir",
        str(tmp_path / "data"),
        "--database-url",
        url,
        "--admin-password-env",
        "OPS_ADMIN_PW",
        OPS_ADMIN_PW="from-the-vault-42",
    )
    assert result.returncode == 0, result.stderr
    assert "database migrated from empty to " in result.stdout
    assert "created admin user 'admin' with the password from OPS_ADMIN_PW" in result.stdout
    assert "from-the-vault-42" not in result.stdout + result.stderr
    assert f"start the server: evalkit server --config {config}" in result.stdout
    settings = load_settings(config, env={})
    assert settings.database.url == url
    assert config.stat().st_mode & 0o777 == 0o600
    # No embedded cluster for an external database, and no key file beside it.
    assert not (tmp_path / "data" / "postgres").exists()

    err = serve_and_login(config, "from-the-vault-42")
    assert "the PostgreSQL at database.url" in err


def test_refuses_to_overwrite_a_config_and_names_it(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  port: 9000\n")
    result = init("--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"evalkit: error: {config} already exists; pass --force to overwrite it (its "
        "encryption_key is kept), or --config with another path"
    )
    assert config.read_text() == "server:\n  port: 9000\n"
    assert not (tmp_path / "data").exists()


def test_refuses_bad_input_before_touching_anything(tmp_path):
    config, data = tmp_path / "config.yaml", tmp_path / "data"
    base = ("--config", str(config), "--data-dir", str(data))

    unset = init(*base, "--admin-password-env", "NOT_SET_ANYWHERE")
    assert unset.returncode == 1
    assert "--admin-password-env names NOT_SET_ANYWHERE, which is not set or empty" in unset.stderr

    short = init(*base, "--admin-password-env", "PW", PW="short")
    assert short.returncode == 1
    assert "the PW is 5 characters long; use at least 8" in short.stderr

    not_a_url = init(*base, "--database-url", "mysql://db/evalkit")
    assert not_a_url.returncode == 1
    assert "--database-url must be a PostgreSQL URL" in not_a_url.stderr

    no_dir = init("--config", str(tmp_path / "missing" / "config.yaml"))
    assert no_dir.returncode == 1
    assert f"the directory of {tmp_path / 'missing' / 'config.yaml'} does not exist" in (
        no_dir.stderr
    )

    assert not config.exists() and not data.exists()


def test_unreachable_database_writes_no_config(tmp_path):
    config = tmp_path / "config.yaml"
    dead = f"postgresql://evalkit:pw@127.0.0.1:{free_port()}/evalkit"
    result = init("--config", str(config), "--database-url", dead, "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert "cannot connect to the database" in result.stderr
    assert f"(nothing was written to {config})" in result.stderr
    assert not config.exists()
