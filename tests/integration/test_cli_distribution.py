"""The server hands out its own CLI: /api/cli, the wheel under /cli/, the update nudge and
`evalkit update`, which really installs the served wheel as a uv tool."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from evalkit import __version__
from evalkit.distribution import VERSION_HEADER, is_newer, wheel_name
from evalkit.edge import app as edge_app

EVALKIT = str(Path(sys.executable).parent / "evalkit")


def test_api_cli_names_the_served_wheel_and_the_wheel_is_this_evalkit(server):
    info = httpx.get(f"{server.url}/api/cli").json()
    wheel_url = f"{server.url}/cli/{wheel_name()}"
    assert info == {
        "version": __version__,
        "install": f"uv tool install --reinstall {wheel_url}",
        "wheel_url": wheel_url,
        "pypi_install": f'uv tool install --reinstall "evalkit-py=={__version__}"',
        "pip_install": f"python3 -m pip install --upgrade {wheel_url}",
        "page_url": f"{server.url}/cli",
    }
    page = httpx.get(f"{server.url}/cli")  # the install page: test_cli_install.py
    assert page.status_code == 200 and wheel_url in page.text
    wheel = httpx.get(wheel_url, timeout=300)
    assert wheel.status_code == 200, wheel.text
    with zipfile.ZipFile(io.BytesIO(wheel.content)) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"evalkit_py-{__version__}.dist-info/METADATA").decode()
    assert "Name: evalkit-py" in metadata and f"Version: {__version__}" in metadata
    # Code and the files the server and the demo read at run time travel in the wheel.
    for needed in (
        "evalkit/cli/app.py",
        "evalkit/web/templates/base.html",
        "evalkit/web/static/app.css",
        "evalkit/demo/cases/arithmetic/add.yaml",
        "evalkit/otel/starters/openinference.json",
    ):
        assert needed in names, needed


def test_only_this_version_is_served(server):
    r = httpx.get(f"{server.url}/cli/evalkit_py-0.0.1-py3-none-any.whl")
    assert r.status_code == 404
    assert wheel_name() in r.json()["error"]["message"]


def test_every_answer_carries_the_server_version(server):
    assert httpx.get(f"{server.url}/healthz").headers[VERSION_HEADER] == __version__


@pytest.mark.parametrize(
    ("server_version", "mine", "newer"),
    [
        ("0.2.0", "0.1.0", True),
        ("0.1.0", "0.1.0", False),
        ("0.1.10", "0.1.9", True),
        ("1.0", "1.0.0", False),
        ("0.1.0", "0.2.0", False),
        ("garbage", "0.1.0", False),
    ],
)
def test_version_order(server_version, mine, newer):
    assert is_newer(server_version, mine) is newer


def test_an_older_cli_is_nudged_once_per_command(server, cli, admin_token, monkeypatch):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    same = cli("workspaces", "list", token=admin_token)
    assert same.code == 0 and "evalkit update" not in same.err
    monkeypatch.setattr(edge_app, "VERSION", (VERSION_HEADER.encode(), b"99.0.0"))
    monkeypatch.setattr("evalkit.cli.client._nudged", False)
    nudged = cli("workspaces", "list", token=admin_token)
    assert nudged.code == 0
    line = f"evalkit 99.0.0 is on the server and this CLI is {__version__}: run `evalkit update`"
    assert nudged.err.count(line) == 1
    assert "admin" in nudged.out  # the command itself still ran


def test_update_dry_run_prints_the_install_command(server, cli, admin_token):
    cli.monkeypatch.setenv("EVALKIT_SERVER_URL", server.url)
    r = cli("update", "--dry-run", "--force", "--json", token=admin_token)
    assert r.code == 0, r.err
    assert r.json["command"][-1] == f"{server.url}/cli/{wheel_name()}"
    assert r.json["ran"] is False
    same = cli("update", token=admin_token)
    assert same.code == 0 and "already" in same.out


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv installs the tool; CI has it")
def test_update_installs_the_served_wheel_as_a_uv_tool(server, admin_token, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "VIRTUAL_ENV"))}
    env |= {
        "EVALKIT_SERVER_URL": server.url,
        "EVALKIT_TOKEN": admin_token,
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
    }
    done = subprocess.run(
        [EVALKIT, "update", "--force"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    installed = subprocess.run(
        [str(tmp_path / "bin" / "evalkit"), "--version"], capture_output=True, text=True, env=env
    )
    assert installed.stdout.strip() == __version__, installed.stderr
