"""The node parts of the framework tests: a ``tests/frameworks/<name>/`` with a
``package.json`` and a committed ``package-lock.json`` (exact versions), none of it a
dependency of evalkit.

:func:`ensure_node_modules` installs the part's ``node_modules`` from its lock with ``npm ci
--no-audit --no-fund`` when it is missing or older than ``package-lock.json`` (.ci/run runs
the same ``npm ci`` up front, so under CI this finds it installed). Two pytest processes that
race are serialised by a lock file beside the part (``.npm-ci.lock``, ignored by git).
:func:`run_node_agent` runs a script of the part with ``node``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTALL_TIMEOUT = 600.0
RUN_TIMEOUT = 120.0
INSTALLED = Path("node_modules") / ".package-lock.json"
"""npm's own record of what it installed, (re)written by every ``npm ci`` and ``npm install``:
its mtime is the install's."""


class NodePartError(RuntimeError):
    """A node part could not be installed; the message names the part and quotes npm."""


def part_dir(name: str) -> Path:
    return HERE / name


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise NodePartError(f"the node framework tests need `{name}` on PATH (Node 20 or later)")
    return path


def _installed(part: Path) -> bool:
    installed = part / INSTALLED
    lock = part / "package-lock.json"
    return installed.is_file() and installed.stat().st_mtime >= lock.stat().st_mtime


def ensure_node_modules(name: str) -> Path:
    """The part's ``node_modules``, installed from ``package-lock.json`` when missing or
    older than the lock."""
    part = part_dir(name)
    lock = part / "package-lock.json"
    if not lock.is_file():
        raise NodePartError(
            f"node part {name!r}: no {lock} (run `npm install` in {part} and commit the lock)"
        )
    modules = part / "node_modules"
    if _installed(part):
        return modules
    with open(part / ".npm-ci.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if _installed(part):  # another process installed it while we waited
            return modules
        command = [_tool("npm"), "ci", "--no-audit", "--no-fund"]
        try:
            done = subprocess.run(
                command,
                cwd=part,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise NodePartError(
                f"node part {name!r}: `{' '.join(command[1:])}` in {part} took over "
                f"{INSTALL_TIMEOUT:.0f}s\n--- npm stdout ---\n{_text(exc.stdout)}"
                f"\n--- npm stderr ---\n{_text(exc.stderr)}"
            ) from None
        if done.returncode != 0:
            raise NodePartError(
                f"node part {name!r}: `npm {' '.join(command[1:])}` in {part} failed "
                f"(exit {done.returncode})\n--- npm stdout ---\n{done.stdout.strip()}"
                f"\n--- npm stderr ---\n{done.stderr.strip()}"
            )
    return modules


def run_node_agent(
    name: str,
    script: str,
    env: Mapping[str, str],
    *,
    timeout: float = RUN_TIMEOUT,
    args: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``node tests/frameworks/<name>/<script>`` in the part's directory, ``env`` added to
    the test process's environment less its OTEL_* and EVALKIT_* variables. Raises
    AssertionError with stdout and stderr on a non-zero exit or a timeout."""
    ensure_node_modules(name)
    part = part_dir(name)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "EVALKIT_", "NODE_OPTIONS", "npm_"))
    }
    command = [_tool("node"), str(part / script), *(args or [])]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**base, **env},
            cwd=part,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"node {name}/{script} did not finish within {timeout:.0f}s"
            f"\n--- stdout ---\n{_text(exc.stdout)}\n--- stderr ---\n{_text(exc.stderr)}"
        ) from None
    if done.returncode != 0:
        raise AssertionError(
            f"node {name}/{script} exited {done.returncode}"
            f"\n--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
        )
    return done


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""
