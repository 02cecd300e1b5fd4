"""``evalkit update``: install the CLI of the server you are logged in to."""

from __future__ import annotations

import shutil
import subprocess
from typing import Annotated

from cyclopts import Parameter

from evalkit import __version__
from evalkit.cli.app import JsonFlag
from evalkit.cli.client import Client
from evalkit.cli.output import CliError, emit_json, note, say
from evalkit.distribution import install_command
from evalkit.model import api


def update(
    *,
    dry_run: Annotated[
        bool, Parameter(help="Print the install command instead of running it.")
    ] = False,
    force: Annotated[bool, Parameter(help="Install even when the versions match.")] = False,
    json: JsonFlag = False,
) -> int:
    """Install the server's version of this CLI (from the server's own wheel at /cli).

    Uses `uv tool install` when uv is on PATH, pip otherwise. Every command prints a
    one-line nudge when the server runs a later version than this CLI.
    """
    with Client() as client:
        info: api.CliInfo = client.get("/api/cli", type=api.CliInfo)
    command = install_command(info.wheel_url, uv=shutil.which("uv") is not None)
    needed = force or info.version != __version__
    if json:
        emit_json(
            {
                "server_version": info.version,
                "cli_version": __version__,
                "needed": needed,
                "command": command,
                "ran": needed and not dry_run,
            }
        )
    if not needed:
        if not json:
            say(f"evalkit {__version__} is the server's version already")
        return 0
    if dry_run:
        if not json:
            say(" ".join(command))
        return 0
    note(f"installing evalkit {info.version} from {info.wheel_url}")
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise CliError(f"`{' '.join(command)}` failed (exit {done.returncode}); run it yourself")
    if not json:
        say(f"evalkit {info.version} installed; {__version__} was replaced")
    return 0
