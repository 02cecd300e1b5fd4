"""The CLI a server hands out: its own wheel under ``/cli/``, so every client and CI job
runs the server's version, and the one-line nudge when a CLI is older than its server.

``GET /cli`` is the install page: the uv and pip commands with this server's wheel URL,
written as a shell script that runs the uv one (or pip's without uv). The installers need
a URL that ends in the wheel's file name: uv refuses any other before it sends a request,
and pip unpacks what ``/cli`` would redirect to as a source tree, not a wheel.

The wheel comes from ``server.cli_wheel_dir`` (the container image puts it there), else
from the data dir's ``cli/`` folder, where a server run from a source checkout builds it
once with ``uv build``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import evalkit
from evalkit import __version__
from evalkit.errors import NotFound

if TYPE_CHECKING:
    from evalkit.config import Settings

VERSION_HEADER = "x-evalkit-version"
PACKAGE = "evalkit-py"
_build_lock = threading.Lock()  # builds run in threads, from any event loop


def wheel_name(version: str = __version__) -> str:
    return f"{PACKAGE.replace('-', '_')}-{version}-py3-none-any.whl"


def source_checkout() -> Path | None:
    """The repository this evalkit runs from, when it is one (not an installed wheel)."""
    root = Path(evalkit.__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and f'name = "{PACKAGE}"' in pyproject.read_text():
        return root
    return None


def _shelves(settings: Settings) -> list[Path]:
    configured = settings.server.cli_wheel_dir
    return [Path(configured)] if configured else [settings.data_path / "cli"]


async def cli_wheel(settings: Settings) -> Path:
    """This server's CLI wheel, built on first use from a source checkout."""
    import asyncio  # here: the CLI imports this module for is_newer, and has no loop

    for shelf in _shelves(settings):
        if (shelf / wheel_name()).is_file():
            return shelf / wheel_name()
    root = source_checkout()
    if settings.server.cli_wheel_dir or root is None or shutil.which("uv") is None:
        raise NotFound(
            f"this server has no CLI wheel {wheel_name()}: put it in server.cli_wheel_dir "
            f"({settings.server.cli_wheel_dir or 'unset'}), or install the CLI from PyPI with "
            f'`uv tool install "{PACKAGE}=={__version__}"`',
            code="no-cli-wheel",
        )
    target = settings.data_path / "cli" / wheel_name()
    await asyncio.to_thread(_build_once, root, target)
    return target


def _build_once(root: Path, target: Path) -> None:
    with _build_lock:
        if not target.is_file():
            _build(root, target)


def _build(root: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as out:
        subprocess.run(
            ["uv", "build", "--wheel", "--out-dir", out, str(root)],
            check=True,
            capture_output=True,
            timeout=300,
            # a wheel for any platform: the CLI has no use for the collector's C pass
            env={**os.environ, "EVALKIT_PURE_WHEEL": "1"},
        )
        built = Path(out) / wheel_name()
        built.replace(target)  # atomic: a reader sees no half-written wheel


def _parts(version: str) -> tuple[int, ...] | None:
    match = re.match(r"^(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in match[1].split(".")) if match else None


def is_newer(server: str, mine: str) -> bool:
    """Whether the server's version is a later release than this CLI's."""
    a, b = _parts(server), _parts(mine)
    if a is None or b is None:
        return False
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) > b + (0,) * (width - len(b))


def install_command(wheel_url: str, *, uv: bool) -> list[str]:
    """How `evalkit update` (and a CI job) installs the server's CLI."""
    if uv:
        return ["uv", "tool", "install", "--reinstall", wheel_url]
    return ["python", "-m", "pip", "install", "--upgrade", wheel_url]


def pip_command(wheel_url: str) -> list[str]:
    """How a person or a CI job without uv installs the server's CLI."""
    return ["python3", "-m", "pip", "install", "--upgrade", wheel_url]


def install_page(origin: str, version: str = __version__) -> str:
    """``GET /cli``: the install commands with this server's wheel URL, as a page a person
    reads and a shell script that ``curl -fsS ORIGIN/cli | sh`` runs."""
    wheel_url = f"{origin}/cli/{wheel_name(version)}"
    uv_line = shlex.join(install_command(wheel_url, uv=True))
    pip_line = shlex.join(pip_command(wheel_url))
    return f"""#!/bin/sh
# The evalkit CLI, version {version}, from the evalkit server at {origin}.
#
# Install it with uv (it needs Python 3.11 or newer):
#   {uv_line}
# or with pip:
#   {pip_line}
# or run this page, which uses uv when it is on PATH and pip otherwise:
#   curl -fsS {origin}/cli | sh
#
# Then log in: evalkit login {origin} --username YOUR_NAME
# Scripts and CI read the version and these commands as JSON from {origin}/api/cli.
set -eu
wheel={shlex.quote(wheel_url)}
if command -v uv >/dev/null 2>&1; then
  exec uv tool install --reinstall "$wheel"
fi
if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
  exec python3 -m pip install --upgrade "$wheel"
fi
echo "evalkit: neither uv nor python3 with pip is on PATH; install uv" \
  "(https://docs.astral.sh/uv/) and run this again" >&2
exit 1
"""
