"""The root ``evalkit`` command and the conventions every subcommand follows.

Exit codes: 0 ok, 1 refused or failed, 2 usage error. Errors go to stderr in one line.
"""

from __future__ import annotations

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
    error_console=Console(stderr=True, soft_wrap=True, highlight=False, markup=False),
)


def run(argv: list[str] | None = None) -> int:
    """Run one command line; returns the exit code instead of exiting."""
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
        if os.environ.get("EVALKIT_DEBUG"):
            raise
        sys.stderr.write(
            f"evalkit: internal error: {type(exc).__name__}: {exc} "
            "(set EVALKIT_DEBUG=1 to see the traceback, and please report it)\n"
        )
        return 1
    return result if isinstance(result, int) else 0
