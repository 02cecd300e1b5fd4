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


NEVER_USED = ("httpx._main",)
"""A module httpx imports when it is installed and no command uses: httpx's own command line
(with click, rich and pygments, some 100 modules; rich comes with cyclopts). None in
sys.modules makes its import fail, and httpx goes on without it."""


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
    for name in NEVER_USED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    from evalkit.cli.app import run

    sys.exit(run())
