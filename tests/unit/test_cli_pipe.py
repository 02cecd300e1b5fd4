"""`evalkit ... | head`: when the reader of stdout goes away, the CLI ends quietly with exit 0,
as Unix tools do (issue 18), not with "internal error: BrokenPipeError"."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

fcntl = pytest.importorskip("fcntl")
if not hasattr(fcntl, "F_SETPIPE_SZ"):
    pytest.skip("needs Linux's F_SETPIPE_SZ to make the pipe break", allow_module_level=True)

# What the `evalkit` console script runs.
CLI = [sys.executable, "-c", "import sys; from evalkit.cli import main; sys.exit(main())"]
PIPE_SIZE = 4096  # the smallest pipe; the outputs below are longer, so the reader leaves first
STARTER = ["agents", "mapping", "starter", "auto"]  # 7.5 kB of JSON, no server needed


def _reader_leaves(args: list[str], *, first_line: bool, unbuffered: bool):
    """Run the CLI with stdout a pipe whose reader reads the first line and closes it, like
    `head -1` (or, without first_line, closes it before the CLI writes anything, like
    `| true`), while the CLI still has output to write. Returns the line read, the exit code
    and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    line = b""
    if not first_line:
        os.close(read_end)
    with subprocess.Popen(CLI + args, stdout=write_end, stderr=subprocess.PIPE, env=env) as child:
        os.close(write_end)
        if first_line:
            while not line.endswith(b"\n") and (byte := os.read(read_end, 1)):
                line += byte
            os.close(read_end)
        _, stderr = child.communicate(timeout=30)
    return line.decode(), child.returncode, stderr.decode()


@pytest.mark.parametrize(
    ("args", "first_line", "unbuffered", "line_read"),
    [
        # stdout unbuffered (or output beyond Python's buffer): a write in the command fails
        (STARTER, False, True, ""),
        # the output is still in Python's buffer when the command returns: the flush fails
        (STARTER, True, False, "{\n"),
        # help is printed by rich, whose own broken-pipe handling exits 1
        (["--help"], True, False, "Usage: evalkit COMMAND\n"),
    ],
    ids=["write-in-command", "final-flush", "help"],
)
def test_a_closed_pipe_ends_the_cli_quietly_with_exit_0(args, first_line, unbuffered, line_read):
    line, code, stderr = _reader_leaves(args, first_line=first_line, unbuffered=unbuffered)
    assert line == line_read
    assert (code, stderr) == (0, "")
