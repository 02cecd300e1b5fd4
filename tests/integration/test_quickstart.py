"""Docs that run: every command in docs/quickstart.md's ```sh blocks, in order, as a user
types them, in a fresh directory with a fresh home.

What the page names and the test replaces (the placeholders):

- ``uv run evalkit`` -> this environment's ``evalkit`` (the page is read from the repo
  root, where ``uv run`` finds the project; the test runs in a scratch directory);
- port ``8600`` (the server) and ``8700`` (the reference harness) -> free ports, in the
  commands and, for the server, as ``EVALKIT_SERVER_PORT`` (the config init-server wrote
  keeps the default port);
- the admin password ``quickstart-admin-pw`` -> a random one.

A line ending in ``&`` starts a background process; the test waits until it serves (the
server's /readyz, the harness's port), as a reader waits for its "serving on" line, and
stops it at the end. ``export`` lines change the environment of the commands after them.
A command that exits non-zero fails the test with the command and its output.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.integration.test_server_process import EVALKIT, postgres_running_in

DOC = Path(__file__).parents[2] / "docs" / "quickstart.md"
DOC_SERVER_PORT = "8600"
DOC_HARNESS_PORT = "8700"
DOC_PASSWORD = "quickstart-admin-pw"
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


def shell_commands(markdown: str) -> list[str]:
    """Each command of the ```sh blocks: one line, with its backslash continuations and its
    here-document; blank lines and comment lines are not commands."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.M | re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            command = [line]
            while command[-1].endswith("\\") and i < len(lines):
                command.append(lines[i])
                i += 1
            heredoc = HEREDOC.search(command[-1])
            if heredoc:
                while i < len(lines):
                    command.append(lines[i])
                    i += 1
                    if command[-1].strip() == heredoc[2]:
                        break
                else:
                    raise AssertionError(f"here-document never ends: {command[0]}")
            commands.append("\n".join(command))
    return commands


@dataclass
class Session:
    """The reader's shell: a working directory, an environment, background jobs."""

    cwd: Path
    env: dict[str, str]
    server_url: str
    substitutions: dict[str, str]
    background: list[tuple[str, subprocess.Popen[str]]] = field(default_factory=list)

    def prepare(self, command: str) -> str:
        command = command.replace("uv run evalkit", EVALKIT)
        for doc_value, test_value in self.substitutions.items():
            command = re.sub(rf"(?<![\w-]){re.escape(doc_value)}(?![\w-])", test_value, command)
        return command

    def run(self, command: str) -> subprocess.CompletedProcess[str] | None:
        prepared = self.prepare(command)
        if prepared.startswith("export "):
            self._export(command, prepared)
            return None
        if prepared.rstrip().endswith("&"):
            self._start(command, prepared.rstrip()[:-1])
            return None
        result = subprocess.run(
            ["bash", "-c", prepared],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        if result.returncode != 0:
            raise AssertionError(self._failure(command, result.returncode, result))
        return result

    def _export(self, command: str, prepared: str) -> None:
        result = subprocess.run(
            ["bash", "-c", f"{prepared}\nenv -0"],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if result.returncode != 0:
            raise AssertionError(self._failure(command, result.returncode, result))
        pairs = (item.partition("=") for item in result.stdout.split("\0") if item)
        self.env = {name: value for name, _, value in pairs}

    def _start(self, command: str, prepared: str) -> None:
        proc = subprocess.Popen(
            ["bash", "-c", prepared],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.background.append((command, proc))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(
                    f"`{command}` exited with {proc.returncode} before it served\n"
                    f"--- stdout\n{out}\n--- stderr\n{err}"
                )
            if self._serving(prepared):
                return
            time.sleep(0.2)
        raise AssertionError(f"`{command}` did not start serving within 120 s")

    def _serving(self, prepared: str) -> bool:
        if " server " in f" {prepared} ":
            try:
                return httpx.get(f"{self.server_url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False
        port = re.search(r"--port (\d+)", prepared)
        assert port, f"no way to tell when this background command serves: {prepared}"
        with socket.socket() as probe:
            probe.settimeout(1)
            return probe.connect_ex(("127.0.0.1", int(port[1]))) == 0

    def stop_background(self) -> None:
        for _, proc in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for command, proc in self.background:
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise AssertionError(f"`{command}` did not stop on SIGTERM") from None

    @staticmethod
    def _failure(command: str, code: int, result: subprocess.CompletedProcess[str]) -> str:
        return (
            f"docs/quickstart.md command failed (exit {code}):\n  {command}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )


def test_the_page_has_the_commands_of_every_step():
    commands = shell_commands(DOC.read_text())
    firsts = [shlex.split(c.splitlines()[0], comments=True)[:3] for c in commands]
    assert ["uv", "run", "evalkit"] in firsts
    text = "\n".join(commands)
    for step in (
        "evalkit try",
        "evalkit init-server",
        "evalkit server",
        "evalkit login",
        "evalkit workspaces create",
        "evalkit sync",
        "evalkit agents create",
        "evalkit run",
        "evalkit experiments scores",
    ):
        assert step in text, f"docs/quickstart.md lost its `{step}` step"


@pytest.fixture
def scratch() -> Iterator[Path]:
    """Not under pytest's basetemp: run as root, the embedded PostgreSQL needs its parents
    traversable, and a concurrent pytest session resets basetemp's parent to 0700."""
    path = Path(tempfile.mkdtemp(prefix="evalkit-quickstart-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_every_quickstart_command_runs_in_order(scratch):
    home = scratch / "home"
    work = scratch / "work"
    for directory in (home, work):
        directory.mkdir()
    server_port, harness_port = str(free_port()), str(free_port())
    password = f"qs-{secrets.token_urlsafe(12)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env |= {
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "EVALKIT_SERVER_PORT": server_port,
    }
    session = Session(
        cwd=work,
        env=env,
        server_url=f"http://127.0.0.1:{server_port}",
        substitutions={
            DOC_SERVER_PORT: server_port,
            DOC_HARNESS_PORT: harness_port,
            DOC_PASSWORD: password,
        },
    )
    outputs: dict[str, str] = {}
    try:
        for command in shell_commands(DOC.read_text()):
            result = session.run(command)
            if result is not None:
                outputs[command] = result.stdout
    finally:
        session.stop_background()

    # What the reader should have seen on the way.
    init = next(out for cmd, out in outputs.items() if "init-server" in cmd)
    assert "created admin user 'admin' with the password from EVALKIT_ADMIN_PASSWORD" in init
    assert password not in (work / "config.yaml").read_text()
    scores = next(out for cmd, out in outputs.items() if "experiments scores" in cmd)
    for name in ("exact_match", "tool_calls", "numeric", "latency"):
        assert name in scores, scores
    assert not postgres_running_in(work / "evalkit-data"), "the server left PostgreSQL running"
