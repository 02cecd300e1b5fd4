"""The root ``evalkit`` command and the conventions every subcommand follows.

Exit codes: 0 ok, 1 refused or failed, 2 usage error. Errors go to stderr in one line.
When the reader of stdout goes away (``evalkit ... | head``), the command ends quietly with 0.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Annotated

from cyclopts import App, Parameter
from cyclopts.exceptions import CycloptsError
from rich.console import Console

from evalkit import __version__
from evalkit.cli.output import CliError
from evalkit.errors import EvalkitError

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print machine-readable JSON on stdout.")]


def _one_line_usage_error(error: CycloptsError) -> str:
    message = " ".join(str(error).split())
    return f"evalkit: usage error: {message} (see --help)"


class _StdoutConsole(Console):
    """Help and --version's console. Rich exits 1 on a broken pipe; this hands the error to
    run(), which ends every command the same way on a closed pipe."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


app = App(
    name="evalkit",
    help=(
        "evalkit: evaluate LLM agents on your own server.\n\n"
        "Server URL and login come from `evalkit login`, or from EVALKIT_SERVER_URL and "
        "EVALKIT_TOKEN."
    ),
    version=__version__,
    result_action="return_value",
    default_parameter=Parameter(negative=()),
    error_formatter=_one_line_usage_error,
    console=_StdoutConsole(),
    error_console=Console(stderr=True, soft_wrap=True, highlight=False, markup=False),
)


def run(argv: list[str] | None = None) -> int:
    """Run one command line; returns the exit code instead of exiting."""
    try:
        code = _run(argv)
        # What is still buffered is written here, not in Python's flush at exit, where a
        # closed pipe could only be reported as "Exception ignored" with exit 120.
        sys.stdout.flush()
    except OSError as exc:
        if not _is_broken_pipe(exc):
            raise
        return _stdout_reader_gone()
    return code


def _is_broken_pipe(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE
    )


def _stdout_reader_gone() -> int:
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


def _run(argv: list[str] | None) -> int:
    from evalkit.cli import register

    register()
    try:
        result = app(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (CliError, EvalkitError) as exc:
        sys.stderr.write(f"evalkit: error: {exc.message}\n")
        return getattr(exc, "exit_code", 1)
    except KeyboardInterrupt:
        sys.stderr.write("evalkit: interrupted\n")
        return 130
    except Exception as exc:
        if _is_broken_pipe(exc):
            raise  # run() ends quietly
        if os.environ.get("EVALKIT_DEBUG"):
            raise
        from evalkit import ISSUES_URL

        sys.stderr.write(
            f"evalkit: internal error: {type(exc).__name__}: {exc} "
            f"(set EVALKIT_DEBUG=1 to see the traceback, and please report it at {ISSUES_URL})\n"
        )
        return 1
    return result if isinstance(result, int) else 0
