"""The CLI starts on every command a user or CI types: what it imports is paid each time.

A count of modules is stable where a time is not; benchmarks/cli_start.py has the times.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from evalkit import __version__
from evalkit.cli import VERSION_MODULE_BUDGET, help_pages

HEAVY = ("numpy", "scipy", "playwright", "google.cloud.storage")
SERVER = ("psycopg", "argon2", "joserfc", "procrastinate", "starlette", "sqlalchemy", "uvicorn")
"""The server's own libraries: a command that only talks HTTP has no use for them."""

THIN_COMMAND_MODULE_BUDGET = 400
"""Modules a command that only talks HTTP may load (cyclopts, httpx and msgspec are some 280
of them; `evalkit whoami` loaded 310 and `evalkit lint` 345 when this was set)."""

COMMAND_MODULES = ("evalkit.cli.sync", "evalkit.cli.server", "evalkit.cli.compare")
"""Command modules that `evalkit whoami` has no reason to import."""

REGENERATE = "uv run python tests/unit/test_reference_docs.py"
DEMO_SUITE = Path(__file__).parents[2] / "evalkit" / "demo" / "cases" / "arithmetic"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a user with no login and no say in how rich draws."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("EVALKIT_")
        and k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS", "LINES")
    }
    env["EVALKIT_CLI_CONFIG_DIR"] = str(tmp_path / "cli-config")
    return {**env, **extra}


def run_cli(argv: list[str], env: dict[str, str], report: Path) -> tuple[int, str, list[str]]:
    """Run ``evalkit ARGV`` as the installed script does; (exit code, stdout, the modules
    loaded by the time it exits)."""
    probe = (
        "import json, sys\n"
        "from evalkit.cli import main\n"
        f"sys.argv = ['evalkit', *{argv!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"with open({str(report)!r}, 'w') as f:\n"
        "    json.dump([name for name, m in sys.modules.items() if m is not None], f)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    modules = json.loads(report.read_text())
    return done.returncode, done.stdout + done.stderr, modules


def test_version_answers_before_the_command_tree_loads(tmp_path):
    """`evalkit --version` is what install scripts and CI run to check the CLI: it loads
    neither cyclopts nor rich nor a command module."""
    code, out, modules = run_cli(["--version"], clean_env(tmp_path), tmp_path / "m.json")
    assert (code, out) == (0, f"{__version__}\n")
    assert len(modules) <= VERSION_MODULE_BUDGET, f"--version loaded {len(modules)} modules"
    assert "cyclopts" not in modules and "rich" not in modules


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["-h"], [], ["lint", "--help"], ["runs", "--help"], ["runs", "show", "-h"]],
    ids=" ".join,
)
def test_a_help_page_is_printed_without_the_command_tree(tmp_path, argv):
    """Help at any level comes from help_pages.json: the page cyclopts drew, printed
    without loading cyclopts, rich or a command module."""
    code, out, modules = run_cli(argv, clean_env(tmp_path), tmp_path / "m.json")
    path = " ".join(a for a in argv if a not in help_pages.HELP_FLAGS)
    assert code == 0
    assert out == help_pages.without_styles(help_pages.load()["pages"][path])
    assert len(modules) <= VERSION_MODULE_BUDGET, f"{argv} loaded {len(modules)} modules"
    assert not {"cyclopts", "rich", "evalkit.cli.app"} & set(modules)


def test_every_help_page_is_the_one_cyclopts_draws_now():
    """A changed command, flag or help text must be drawn again, or `--help` would print
    the old page; and the page printed for each colour system (and off a terminal) is
    the one cyclopts draws for it. Each is drawn in a process of its own, as rich keeps a
    style's codes once made."""
    stored = help_pages.load()
    systems = ("", *help_pages.COLOUR_SYSTEMS)
    with concurrent.futures.ThreadPoolExecutor(len(systems)) as pool:
        drawn = dict(zip(systems, pool.map(help_pages.draw_all_elsewhere, systems), strict=True))
    paths = sorted(drawn[help_pages.DRAWN_IN])
    assert sorted(stored["pages"]) == paths, f"help pages are missing or gone: run `{REGENERATE}`"
    for colours, pages in drawn.items():
        stale = [
            p for p in paths if help_pages.styled(stored["pages"][p], stored, colours) != pages[p]
        ]
        assert not stale, (
            f"the help pages of {stale} are out of date ({colours}): run `{REGENERATE}`"
        )


@pytest.mark.parametrize("argv", [["--help"], ["experiments", "--help"], ["lint", "-h"], []])
def test_the_page_printed_ahead_is_the_page_the_cli_draws(tmp_path, argv, cli, monkeypatch):
    """The printed page is byte for byte what `evalkit ... --help` prints when cyclopts
    draws it (in-process, through the same entry the commands run through)."""
    monkeypatch.setenv("COLUMNS", "80")  # rich would read a narrower terminal on stdin
    drawn = cli(*argv)
    code, out, _ = run_cli(argv, clean_env(tmp_path), tmp_path / "m.json")
    assert drawn.code == code == 0
    assert drawn.out == out


def run_on_terminal(python: str, columns: int, env: dict[str, str]) -> bytes:
    """What ``python -c PYTHON`` writes on a pseudo-terminal ``columns`` wide."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", python], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert process.wait(timeout=60) == 0, out.decode(errors="replace")
    return out


FAST = "import sys; sys.argv = ['evalkit', 'lint', '--help']; from evalkit.cli import main; main()"
DRAWN_NOW = "import sys; from evalkit.cli.app import run; sys.exit(run(['lint', '--help']))"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminals as on Linux")
@pytest.mark.parametrize(
    ("term", "colorterm", "colours"),
    [("xterm-256color", "", "256"), ("xterm", "truecolor", "truecolor"), ("xterm", "", "standard")],
)
def test_on_a_terminal_the_page_is_the_same_printed_or_drawn(tmp_path, term, colorterm, colours):
    """On a colour terminal wider than the pages, the printed page has the styles cyclopts
    would draw for that terminal, at the width it would draw (80 at most)."""
    env = clean_env(tmp_path, TERM=term, COLORTERM=colorterm)
    stored = help_pages.load()
    page = help_pages.styled(stored["pages"]["lint"], stored, colours)
    expected = page.replace("\n", "\r\n").encode()
    assert run_on_terminal(FAST, 120, env) == run_on_terminal(DRAWN_NOW, 120, env) == expected


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminals as on Linux")
def test_on_a_narrow_terminal_cyclopts_draws_the_page_to_fit(tmp_path):
    env = clean_env(tmp_path, TERM="xterm-256color")
    narrow = run_on_terminal(FAST, 60, env)
    assert narrow == run_on_terminal(DRAWN_NOW, 60, env)
    lines = help_pages.without_styles(narrow.decode()).splitlines()
    assert 50 < max(len(line) for line in lines) <= 60


class Answers(http.server.BaseHTTPRequestHandler):
    """A server that knows one user; every other path is not found."""

    def do_GET(self) -> None:
        from datetime import UTC, datetime

        from evalkit.model import api

        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        if self.path != "/api/auth/whoami":
            self.send_error(404)
            return
        user = api.User(
            username="ada", is_admin=False, disabled=False, created_at=datetime.now(UTC)
        )
        me = api.WhoAmI(user=user, personal_workspace="ada", memberships=[], token_expires_at=None)
        body = msgspec.json.encode(me)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    httpd.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_whoami_loads_its_own_module_and_no_server_library(tmp_path, server):
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = clean_env(tmp_path, EVALKIT_SERVER_URL=url, EVALKIT_TOKEN="t")
    code, out, modules = run_cli(["whoami"], env, tmp_path / "m.json")
    assert (code, server.paths) == (0, ["/api/auth/whoami"]), out
    assert f"ada (user) on {url}" in out
    assert not [m for m in modules if m.split(".")[0] in SERVER + HEAVY]
    assert not set(COMMAND_MODULES) & set(modules), "whoami imported another command's module"
    assert len(modules) <= THIN_COMMAND_MODULE_BUDGET, f"whoami loaded {len(modules)} modules"


@pytest.mark.parametrize(
    "argv", [["runs", "show", "1"], ["experiments", "list"], ["lint", "SUITE"], ["agents", "list"]]
)
def test_a_command_that_talks_http_loads_no_server_library(tmp_path, argv):
    """Against a port nobody listens on: the command gets as far as its first request."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
    argv = [str(DEMO_SUITE) if a == "SUITE" else a for a in argv]
    env = clean_env(tmp_path, EVALKIT_SERVER_URL=url, EVALKIT_TOKEN="t")
    code, out, modules = run_cli(argv, env, tmp_path / "m.json")
    assert code == 1 and f"cannot reach the evalkit server at {url}" in out, out
    assert not [m for m in modules if m.split(".")[0] in SERVER + HEAVY]
    assert len(modules) <= THIN_COMMAND_MODULE_BUDGET, f"{argv} loaded {len(modules)} modules"


def test_the_whole_command_tree_imports_no_server_library():
    """A list of commands drawn now (a narrow terminal's `evalkit --help`) imports every
    command module: none may pull numpy (0.15 s a start) or the like in, nor the server's
    libraries (the database driver, password hashing, JOSE); they are imported where used."""
    probe = (
        "import sys\n"
        "from evalkit.cli import register\n"
        "register()\n"
        f"print(sorted(m for m in {HEAVY + SERVER!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]


def test_the_fast_paths_know_the_flags_cyclopts_knows():
    from evalkit.cli.app import app

    assert tuple(app.help_flags) == help_pages.HELP_FLAGS
    assert tuple(app.version_flags) == ("--version",)
