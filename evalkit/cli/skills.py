"""``evalkit skills install``: vendor evalkit's agent skills and user docs into a repo."""

from __future__ import annotations

import shutil
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.output import CliError, emit_json, say

skills_app = App(
    name="skills",
    help="Agent skills for coding agents working in your repos: using evalkit, writing eval "
    "cases, eval-driven development, connecting traces, deploying the server.",
)

DOCS_FOLDER = "evalkit-docs"
ORIGIN = "{{origin}}"


def skill_names() -> list[str]:
    root = resources.files("evalkit.skills")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "SKILL.md").is_file())


def skill_files(folder: Traversable, prefix: str = "") -> list[tuple[str, str]]:
    """Every file of a skill's folder (SKILL.md, references/, examples), as (relative path,
    text), at any depth; Python's own files are left out."""
    found: list[tuple[str, str]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        relative = f"{prefix}{entry.name}"
        if entry.is_dir() and entry.name != "__pycache__":
            found += skill_files(entry, f"{relative}/")
        elif entry.is_file() and not entry.name.endswith((".py", ".pyc")):
            found.append((relative, entry.read_text()))
    return found


def _write(path: Path, text: str, written: list[str], base: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    written.append(str(path.relative_to(base)))


@skills_app.command(name="install")
def install(
    directory: Annotated[
        Path, Parameter(help="The repo's agent-skills directory (created if missing).")
    ] = Path(".claude/skills"),
    /,
    *,
    origin: Annotated[
        str | None,
        Parameter(
            help="Your server's URL, written where the texts say {{origin}} "
            "(default: EVALKIT_SERVER_URL or your last login's server; else left as is)."
        ),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Write one folder per skill (SKILL.md and what it refers to) and the user docs in
    evalkit-docs/ beside them. Files evalkit wrote before are replaced with this version's."""
    from evalkit.otel.mapping import STARTERS, load_starter
    from evalkit.web.docs_site import docs_dir

    server = origin or _known_server()
    docs = docs_dir()
    if not docs.is_dir():
        raise CliError(f"this evalkit has no user docs at {docs}; reinstall it")
    if directory.exists() and not directory.is_dir():
        raise CliError(f"{directory} is a file; give the skills directory")
    written: list[str] = []

    def text(raw: str) -> str:
        return raw.replace(ORIGIN, server) if server else raw

    root = resources.files("evalkit.skills")
    for name in skill_names():
        target = directory / name
        shutil.rmtree(target, ignore_errors=True)  # a file dropped upstream goes here too
        for relative, raw in skill_files(root.joinpath(name)):
            _write(target / relative, text(raw), written, directory)
    for starter in STARTERS:
        body = json_text(load_starter(starter))
        _write(
            directory / "connect-traces" / "mappings" / f"{starter}.json", body, written, directory
        )
    shutil.rmtree(directory / DOCS_FOLDER, ignore_errors=True)
    for page in sorted(docs.glob("*.md")):
        _write(directory / DOCS_FOLDER / page.name, text(page.read_text()), written, directory)
    if json:
        emit_json({"directory": str(directory), "origin": server, "files": written})
    else:
        say(
            f"wrote {len(skill_names())} skills and {DOCS_FOLDER}/ into {directory} "
            f"({len(written)} files)"
        )
        if not server:
            say(f"{ORIGIN} left as is: pass --origin URL (or log in) to fill in your server")
    return 0


def json_text(value: object) -> str:
    import json as _json

    return _json.dumps(value, indent=2) + "\n"


def _known_server() -> str | None:
    import os

    from evalkit.cli import credentials
    from evalkit.cli.client import SERVER_URL_ENV

    url = os.environ.get(SERVER_URL_ENV) or credentials.load().default_server
    return url.rstrip("/") if url else None
