"""The ``evalkit`` command line."""

from __future__ import annotations

import sys


def register() -> None:
    """Import every command module (the reference docs and tests walk the whole tree); a
    command line imports only the modules of the command it runs."""
    from evalkit.cli.app import load_commands

    load_commands()


VERSION_MODULE_BUDGET = 150
"""Modules `evalkit --version` and `evalkit ... --help` may load (tests/unit/test_cli_start.py
counts them)."""


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--version"]:
        # Answered before the command tree (cyclopts, rich, the command modules) loads.
        from evalkit import __version__

        print(__version__)
        sys.exit(0)
    from evalkit.cli.help_pages import print_page

    if print_page(argv):  # the page as cyclopts drew it ahead of time (help_pages.py)
        sys.exit(0)
    # httpx imports its own command line when click, rich and pygments are installed (they
    # are: rich comes with cyclopts), some 100 modules this process never uses. None here
    # makes that import fail, and httpx goes on without it.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from evalkit.cli.app import run

    sys.exit(run())
