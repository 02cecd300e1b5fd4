"""Cached virtualenvs for the third-party parts of the framework tests.

Each part (``tests/frameworks/<name>/``) pins its own dependencies in ``requirements.txt``
(compiled from ``requirements.in`` with ``uv pip compile requirements.in -o
requirements.txt``); none of them is a dependency of evalkit. :func:`framework_python` builds
the part's venv once, with ``uv venv --python 3.11`` and ``uv pip install -r
requirements.txt``, under ``~/.cache/evalkit-tests/venvs/<name>-<sha256[:12] of
requirements.txt>``, so a changed pin file gets a new venv. It is built in a temporary
directory beside its final place and renamed into place, so two pytest processes that race
both end with one whole venv (the loser's build is thrown away).

:func:`run_agent` runs a script of the part with that venv's python. Parts of other test
directories (``tests/importers/``) pass ``home``, the directory that holds them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("EVALKIT_TEST_VENVS") or Path.home() / ".cache/evalkit-tests/venvs")
PYTHON_VERSION = "3.11"
BUILD_TIMEOUT = 900.0
RUN_TIMEOUT = 120.0


class FrameworkVenvError(RuntimeError):
    """A part's venv could not be built; the message names the part and quotes uv."""


def part_dir(name: str, home: Path = HERE) -> Path:
    return home / name


def venv_dir(name: str, home: Path = HERE) -> Path:
    """Where the part's venv lives (whether or not it is built yet)."""
    requirements = part_dir(name, home) / "requirements.txt"
    if not requirements.is_file():
        raise FrameworkVenvError(
            f"framework part {name!r}: no {requirements} (compile it with `uv pip compile "
            f"requirements.in -o requirements.txt` in {part_dir(name, home)})"
        )
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    return CACHE / f"{name}-{digest}"


def _python_in(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise FrameworkVenvError("the framework tests need `uv` on PATH to build their venvs")
    return uv


def _run_uv(name: str, args: list[str], env: Mapping[str, str]) -> None:
    try:
        done = subprocess.run(
            [_uv(), *args],
            capture_output=True,
            text=True,
            env=dict(env),
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FrameworkVenvError(
            f"framework part {name!r}: `uv {' '.join(args)}` took over {BUILD_TIMEOUT:.0f}s"
            f"\n--- stderr ---\n{exc.stderr or ''}"
        ) from None
    if done.returncode != 0:
        raise FrameworkVenvError(
            f"framework part {name!r}: `uv {' '.join(args)}` failed (exit {done.returncode})"
            f"\n--- stderr ---\n{done.stderr.strip()}"
        )


def framework_python(name: str, home: Path = HERE) -> Path:
    """The python of the part's venv, built (once per pin file) when missing. ``home`` is
    the directory that holds the part (default: tests/frameworks/)."""
    final = venv_dir(name, home)
    python = _python_in(final)
    if python.exists():
        return python
    requirements = part_dir(name, home) / "requirements.txt"
    CACHE.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=CACHE))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT")}
    try:
        # --relocatable: the venv's scripts and activation do not hard-code the temp path it
        # was built in (python itself is found through pyvenv.cfg, which names the base).
        _run_uv(
            name,
            ["venv", "--quiet", "--relocatable", "--python", PYTHON_VERSION, str(build / "v")],
            env,
        )
        _run_uv(
            name,
            [
                "pip",
                "install",
                "--quiet",
                # Byte-compiled at build time: test runs may have PYTHONDONTWRITEBYTECODE set,
                # and a large part (Phoenix) then compiles its imports on every start.
                "--compile-bytecode",
                "--python",
                str(_python_in(build / "v")),
                "-r",
                str(requirements),
            ],
            env,
        )
        try:
            os.rename(build / "v", final)  # atomic; fails if another process got there first
        except OSError:
            if not python.exists():
                raise
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return python


def run_agent(
    name: str,
    script: str,
    env: Mapping[str, str],
    *,
    timeout: float = RUN_TIMEOUT,
    args: list[str] | None = None,
    home: Path = HERE,
) -> subprocess.CompletedProcess[str]:
    """Run ``tests/frameworks/<name>/<script>`` with the part's venv python, ``env`` added to
    a clean environment (PATH, HOME and the like kept; no PYTHONPATH or VIRTUAL_ENV of the
    test process). Raises AssertionError with stdout and stderr on a non-zero exit or a
    timeout."""
    python = framework_python(name, home)
    path = part_dir(name, home) / script
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not k.startswith(("OTEL_", "EVALKIT_"))
    }
    command = [str(python), str(path), *(args or [])]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**base, "PYTHONUNBUFFERED": "1", **env},
            cwd=part_dir(name, home),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{name}/{script} did not finish within {timeout:.0f}s"
            f"\n--- stdout ---\n{_text(exc.stdout)}\n--- stderr ---\n{_text(exc.stderr)}"
        ) from None
    if done.returncode != 0:
        raise AssertionError(
            f"{name}/{script} exited {done.returncode}"
            f"\n--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
        )
    return done


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""
