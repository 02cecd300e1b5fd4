"""CLI start benchmark: how long `evalkit` takes to answer, or to send its first request.

Each command runs as a user runs it, in a process of its own started from this
interpreter, with its output to a pipe; the thin commands talk to a loopback HTTP server in
this process, which notes when their first request arrives (the clock is this process's:
from just before the child is started). Every case runs --repeat times and the median is
reported, with the modules the command had loaded at exit (from one more run).

With ``--against DIR`` (a checkout of another commit, e.g. ``git archive main | tar -x -C
DIR``) the same cases run on that tree too, alternating old and new run by run, and the
ratio new/old is printed; without it, the ratio to the target. Both trees run with
bytecode caches, as an installed CLI has them (a warm-up run writes them).

    uv run python benchmarks/cli_start.py [--repeat 15] [--against DIR]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from evalkit.model import api

ROOT = Path(__file__).resolve().parents[1]
DEMO_SUITE = ROOT / "evalkit" / "demo" / "cases" / "arithmetic"
HELP_TARGET = 0.15
REQUEST_TARGET = 0.30

# (name, argv, what is timed: "exit" or "first request", target in seconds)
CASES: list[tuple[str, list[str], str, float]] = [
    ("--version", ["--version"], "exit", HELP_TARGET),
    ("--help", ["--help"], "exit", HELP_TARGET),
    ("lint --help", ["lint", "--help"], "exit", HELP_TARGET),
    ("runs --help", ["runs", "--help"], "exit", HELP_TARGET),
    ("whoami", ["whoami"], "first request", REQUEST_TARGET),
    ("runs show 1", ["runs", "show", "1"], "first request", REQUEST_TARGET),
    ("experiments list", ["experiments", "list"], "first request", REQUEST_TARGET),
    ("lint SUITE", ["lint", str(DEMO_SUITE)], "first request", REQUEST_TARGET),
]

LAUNCH = "import sys; from evalkit.cli import main; sys.argv[0] = 'evalkit'; sys.exit(main())"
"""What the installed `evalkit` script runs."""
COUNT = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: os.write(2, f'\\nMODULES {len(sys.modules)}\\n'.encode()))\n"
    "from evalkit.cli import main\n"
    "sys.argv[0] = 'evalkit'\n"
    "sys.exit(main())\n"
)


class Loopback(http.server.ThreadingHTTPServer):
    """Knows one user; notes when each request arrives."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.arrivals: list[float] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def first_arrival_after(self, started: float) -> float | None:
        with self.lock:
            later = [t for t in self.arrivals if t >= started]
        return min(later) if later else None


_WHOAMI = msgspec.json.encode(
    api.WhoAmI(
        user=api.User(
            username="bench", is_admin=False, disabled=False, created_at=datetime.now(UTC)
        ),
        personal_workspace="bench",
        memberships=[],
        token_expires_at=None,
    )
)
_NOT_FOUND = json.dumps({"error": {"code": "not-found", "message": "not here"}}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        arrived = time.perf_counter()
        server: Loopback = self.server  # type: ignore[assignment]
        with server.lock:
            server.arrivals.append(arrived)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        status, body = (200, _WHOAMI) if self.path == "/api/auth/whoami" else (404, _NOT_FOUND)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


def environment(tree: Path, server: Loopback, config_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("EVALKIT_")
        and k not in ("PYTHONDONTWRITEBYTECODE", "COLUMNS", "NO_COLOR", "FORCE_COLOR")
    }
    env.update(
        PYTHONPATH=str(tree),
        EVALKIT_SERVER_URL=server.url,
        EVALKIT_TOKEN="bench-token",
        EVALKIT_CLI_CONFIG_DIR=str(config_dir),
    )
    return env


def run_once(
    argv: list[str], timed: str, env: dict[str, str], cwd: Path, server: Loopback
) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", LAUNCH, *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    ended = time.perf_counter()
    if timed == "exit":
        return ended - started
    arrived = server.first_arrival_after(started)
    if arrived is None:
        raise SystemExit(f"`evalkit {' '.join(argv)}` sent no request")
    return arrived - started


def modules_loaded(argv: list[str], env: dict[str, str], cwd: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", COUNT, *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stderr.rsplit("MODULES ", 1)[1].split()[0])


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    args = parser.parse_args()
    trees = {"new": ROOT}
    if args.against is not None:
        if not (args.against / "evalkit" / "cli" / "__init__.py").is_file():
            raise SystemExit(f"--against {args.against}: no evalkit/cli there")
        trees = {"old": args.against.resolve(), "new": ROOT}

    server = Loopback()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as scratch:
        cwd = Path(scratch)
        envs = {name: environment(tree, server, cwd / name) for name, tree in trees.items()}
        print(f"load average before: {loadavg()}")
        times: dict[tuple[str, str], list[float]] = {}
        modules: dict[tuple[str, str], int] = {}
        for case, argv, timed, _ in CASES:
            for name, env in envs.items():
                run_once(argv, timed, env, cwd, server)  # warm-up: writes bytecode caches
                modules[case, name] = modules_loaded(argv, env, cwd)
            for n in range(args.repeat):
                order = list(envs) if n % 2 == 0 else list(reversed(envs))
                for name in order:
                    sample = run_once(argv, timed, envs[name], cwd, server)
                    times.setdefault((case, name), []).append(sample)
        print(f"load average after: {loadavg()}")
    server.shutdown()
    report(times, modules, list(trees))


def report(
    times: dict[tuple[str, str], list[float]], modules: dict[tuple[str, str], int], trees: list[str]
) -> None:
    header = ["case", "timed to"]
    for name in trees:
        header += [f"{name} median s", f"{name} min s", f"{name} modules"]
    header += ["new/old" if "old" in trees else "target s", "new/target"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case, _, timed, target in CASES:
        row = [f"`evalkit {case}`", timed]
        medians = {}
        for name in trees:
            samples = times[case, name]
            medians[name] = statistics.median(samples)
            row += [f"{medians[name]:.3f}", f"{min(samples):.3f}", str(modules[case, name])]
        if "old" in trees:
            row.append(f"{medians['new'] / medians['old']:.2f}")
        else:
            row.append(f"{target:.2f}")
        row.append(f"{medians['new'] / target:.2f}")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
