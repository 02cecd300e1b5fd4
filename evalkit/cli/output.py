"""How commands print: plain tables for people, JSON for scripts, errors on stderr."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from typing import Any


class CliError(Exception):
    """A refusal or failure the CLI reports in one line and exits 1 on."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def emit_json(value: Any) -> None:
    import msgspec  # not at the top: help pages print through this module (help_pages.py)

    sys.stdout.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")


def say(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def note(line: str) -> None:
    """Progress and hints go to stderr, so stdout stays clean for pipes."""
    sys.stderr.write(line + "\n")


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    say("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not cells:
        say("(none)")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if hasattr(value, "isoformat"):
        return value.isoformat(timespec="seconds")
    return str(value)


DIRTY = "with uncommitted changes"
"""How a sync from a git tree with uncommitted changes in its files is marked."""


def source_ref(branch: str | None, sha: str | None, *, dirty: bool) -> str:
    """Where a sync came from: ``branch@sha`` (12 characters), marked when it was dirty."""
    ref = f"{branch or '?'}@{(sha or '?')[:12]}"
    return f"{ref} {DIRTY}" if dirty else ref


def is_broken_pipe(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE
    )


def stdout_reader_gone() -> int:
    """The reader of stdout has gone (head has its lines, the pager was quit): end quietly
    with 0, as Unix tools do. stdout becomes devnull, so that the output still buffered and
    Python's flush at exit have somewhere to go."""
    try:
        stdout = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != stdout:
            os.dup2(devnull, stdout)
            os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file (in-process tests), or is closed
        pass
    return 0
