"""The root ``evalkit`` command and the conventions every subcommand follows.

Exit codes: 0 ok, 1 refused or failed, 2 usage error. Errors go to stderr in one line.
When the reader of stdout goes away (``evalkit ... | head``), the command ends quietly with 0.

Commands are registered by name and ``module:attribute`` (COMMANDS); cyclopts imports a
command's module when that command runs, so ``evalkit whoami`` loads neither the database
driver of ``evalkit server`` nor the case parser of ``evalkit sync``. A group that gathers
commands from other modules registers them the same way (``experiments`` in runs.py).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

from cyclopts import App, Parameter
from cyclopts.exceptions import CycloptsError

from evalkit import __version__
from evalkit.cli.output import CliError, is_broken_pipe, stdout_reader_gone
from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from rich.console import Console

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print machine-readable JSON on stdout.")]

COMMANDS: dict[str, str] = {
    "login": "evalkit.cli.accounts:login",
    "logout": "evalkit.cli.accounts:logout",
    "whoami": "evalkit.cli.accounts:whoami",
    "users": "evalkit.cli.accounts:users",
    "audit": "evalkit.cli.accounts:audit_log",
    "agents": "evalkit.cli.agents:agents",
    "experiments": "evalkit.cli.runs:experiments",
    "runs": "evalkit.cli.runs:runs",
    "run": "evalkit.cli.runs:run",
    "contracts": "evalkit.cli.contracts:contracts",
    "datasets": "evalkit.cli.datasets:datasets",
    "cases": "evalkit.cli.datasets:cases",
    "try": "evalkit.cli.demo:try_",
    "evaluators": "evalkit.cli.evaluators:evaluators",
    "harness": "evalkit.cli.harness:harness",
    "import": "evalkit.cli.importing:import_app",
    "init-server": "evalkit.cli.init_server:init_server",
    "llm-providers": "evalkit.cli.judges:providers",
    "judge-default": "evalkit.cli.judges:judge_default",
    "judge": "evalkit.cli.judges:judge",
    "schedules": "evalkit.cli.schedules:schedules",
    "monitors": "evalkit.cli.monitors:monitors",
    "evaluate": "evalkit.cli.scores:evaluate",
    "server": "evalkit.cli.server:server",
    "worker": "evalkit.cli.server:worker",
    "db": "evalkit.cli.server:db",
    "skills": "evalkit.cli.skills:skills_app",
    "lint": "evalkit.cli.sync:lint",
    "sync": "evalkit.cli.sync:sync",
    "tokens": "evalkit.cli.tokens:tokens",
    "traces": "evalkit.cli.traces:traces",
    "update": "evalkit.cli.update:update",
    "workspaces": "evalkit.cli.workspaces:workspaces",
}
"""Every top-level command: its name and where it lives (a function or a group's App)."""


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
)
for _name, _where in COMMANDS.items():
    app.command(_where, name=_name)


def load_commands(group: App = app) -> None:
    """Import every command module under ``group``: a list of commands shows each one's
    summary, which is its own docstring or help (the reference docs and tests walk the
    whole tree)."""
    for name in group:
        if not name.startswith("-"):
            load_commands(group[name])


def run(argv: list[str] | None = None) -> int:
    """Run one command line; returns the exit code instead of exiting."""
    try:
        code = _run(sys.argv[1:] if argv is None else argv)
        # What is still buffered is written here, not in Python's flush at exit, where a
        # closed pipe could only be reported as "Exception ignored" with exit 120.
        sys.stdout.flush()
    except OSError as exc:
        if not is_broken_pipe(exc):
            raise
        return stdout_reader_gone()
    return code


def _run(tokens: list[str]) -> int:
    _prepare_to_print(tokens)
    try:
        result = app(tokens, print_error=False, exit_on_error=False)
    except CycloptsError as exc:
        sys.stderr.write(_one_line_usage_error(exc) + "\n")
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (CliError, EvalkitError) as exc:
        sys.stderr.write(f"evalkit: error: {exc.message}\n")
        return getattr(exc, "exit_code", 1)
    except KeyboardInterrupt:
        sys.stderr.write("evalkit: interrupted\n")
        return 130
    except Exception as exc:
        if is_broken_pipe(exc):
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


def _prepare_to_print(tokens: list[str]) -> None:
    """What cyclopts needs before it prints a help page, a list of commands or the version:
    the console (rich is imported only then), and for a list every listed command."""
    flags = {*app.help_flags, *app.version_flags}  # to cyclopts, commands of their own
    _, apps, _ = app.parse_commands([token for token in tokens if token not in flags])
    lists_commands = apps[-1].default_command is None  # a group: without a command, its help
    if lists_commands:
        load_commands(apps[-1])
    if lists_commands or len(flags.intersection(tokens)) > 0:
        app.console = _stdout_console()


def _stdout_console() -> Console:
    from evalkit.cli.console import StdoutConsole

    return StdoutConsole()
