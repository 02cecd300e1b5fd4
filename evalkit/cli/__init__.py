"""The ``evalkit`` command line."""

from __future__ import annotations

import sys

_registered = False


def register() -> None:
    """Import the command modules once; each adds its commands to the root app."""
    global _registered
    if _registered:
        return
    from evalkit.cli import (  # noqa: F401
        accounts,
        agents,
        cases_mining,
        compare,
        contracts,
        datasets,
        demo,
        evaluators,
        harness,
        importing,
        init_server,
        judges,
        mappings,
        runs,
        schedules,
        scores,
        server,
        skills,
        sync,
        tokens,
        traces,
        traces_check,
        update,
        workspaces,
    )

    _registered = True


VERSION_MODULE_BUDGET = 150
"""Modules `evalkit --version` may load (tests/unit/test_cli_start.py counts them)."""


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        # Answered before the command tree (cyclopts, rich, every command module) loads.
        from evalkit import __version__

        print(__version__)
        sys.exit(0)
    from evalkit.cli.app import run

    sys.exit(run())
