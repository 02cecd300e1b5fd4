"""Reference tables in the docs that are generated from the code, and checked against it:

- docs/cli.md "Every command": one row per command of the cyclopts app, so a new command
  cannot be left out and a removed one cannot linger;
- docs/deploy.md "Every setting": one row per config key with its default and variable,
  from ``evalkit.config.Settings`` (docs/config.md explains each key).

The same run redraws evalkit/cli/help_pages.json, the help pages ``evalkit ... --help``
prints without loading cyclopts (tests/unit/test_cli_start.py checks them).

Regenerate all after changing commands or settings:

    uv run python tests/unit/test_reference_docs.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
CLI_HEADING = "## Every command"
CONFIG_HEADING = "## Every setting"
REGENERATE = "uv run python tests/unit/test_reference_docs.py"

# What an unset (None) default means, where it means more than "unset".
UNSET_MEANS = {
    "data_dir": "the user's data dir (`~/.local/share/evalkit`)",
    "blob_url": "`file://<data_dir>/blobs`",
    "encryption_key": "generated with the embedded database; required otherwise",
    "database.url": "unset: the embedded PostgreSQL",
    "server.public_url": "`http://<host>:<port>`",
    "server.cli_wheel_dir": "`<data_dir>/cli`",
}


# ---------------------------------------------------------------------------- commands


def commands() -> dict[str, str]:
    """Every runnable command path (``users add``) -> the first paragraph of its help."""
    from evalkit.cli import register
    from evalkit.cli.app import app

    register()
    found: dict[str, str] = {}

    def walk(parent: Any, prefix: tuple[str, ...]) -> None:
        for name in parent:
            if name.startswith("-"):
                continue
            sub = parent[name]
            if sub is parent or not sub.show:
                continue
            path = (*prefix, name)
            if sub.default_command is not None:
                first = (sub.help or "").strip().split("\n\n")[0]
                found[" ".join(path)] = " ".join(first.split())
            walk(sub, path)

    walk(app, ())
    return dict(sorted(found.items()))


def cli_table() -> list[str]:
    rows = ["| command | what it does |", "|---|---|"]
    for path, summary in commands().items():
        rows.append(f"| `evalkit {path}` | {_cell(summary)} |")
    return rows


# ---------------------------------------------------------------------------- settings


def settings_rows() -> list[tuple[str, str, str]]:
    """(dotted key, default as the docs show it, environment variable) for every key."""
    from evalkit.config import Settings, _leaf_paths, _struct_in, env_var_names

    env = env_var_names()
    rows = []
    for path in _leaf_paths(Settings):
        key = ".".join(path)
        struct: type[msgspec.Struct] = Settings
        value: Any = Settings()
        for part in path:
            field = next(f for f in msgspec.structs.fields(struct) if f.name == part)
            sub = _struct_in(field.type)
            if value is not None:
                value = getattr(value, part)
            elif field.default is not msgspec.NODEFAULT:
                value = field.default
            elif field.default_factory is not msgspec.NODEFAULT:
                value = field.default_factory()
            else:
                value = msgspec.NODEFAULT
            if sub is not None:
                struct = sub
        rows.append((key, _default(key, value), env[key]))
    return rows


def _default(key: str, value: Any) -> str:
    if value is msgspec.NODEFAULT:
        return "required when its section is set"
    if value is None:
        return UNSET_MEANS.get(key, "unset")
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    return f"`{value}`"


def config_table() -> list[str]:
    rows = ["| key | default | environment variable |", "|---|---|---|"]
    rows += [f"| `{key}` | {default} | `{env}` |" for key, default, env in settings_rows()]
    return rows


# ---------------------------------------------------------------------------- the docs


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table_under(text: str, heading: str) -> tuple[int, int]:
    """Line range [start, end) of the first table after ``heading``."""
    lines = text.splitlines()
    at = lines.index(heading)
    start = next(i for i in range(at, len(lines)) if lines[i].startswith("|"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def replace_table(path: Path, heading: str, table: list[str]) -> None:
    text = path.read_text()
    lines = text.splitlines()
    start, end = table_under(text, heading)
    lines[start:end] = table
    path.write_text("\n".join(lines) + "\n")


def current_table(path: Path, heading: str) -> list[str]:
    text = path.read_text()
    start, end = table_under(text, heading)
    return text.splitlines()[start:end]


def test_every_command_is_in_the_cli_reference():
    documented = [
        row.split("`")[1].removeprefix("evalkit ")
        for row in current_table(CLI_DOC, CLI_HEADING)[2:]
    ]
    actual = list(commands())
    missing = sorted(set(actual) - set(documented))
    gone = sorted(set(documented) - set(actual))
    assert not missing and not gone, (
        f"docs/cli.md is out of date (missing: {missing}, no longer commands: {gone}); "
        f"run `{REGENERATE}` and describe new commands in their group"
    )
    assert current_table(CLI_DOC, CLI_HEADING) == cli_table(), (
        f"a command's help changed: run `{REGENERATE}`"
    )


def test_every_top_level_command_has_a_place_in_the_groups():
    text = CLI_DOC.read_text()
    groups = text[: text.index(CLI_HEADING)]
    for top in sorted({path.split()[0] for path in commands()}):
        assert f"`evalkit {top}" in groups, f"docs/cli.md says nothing about `evalkit {top}`"


def test_every_setting_and_its_default_is_in_the_deploy_reference():
    assert current_table(DEPLOY_DOC, CONFIG_HEADING) == config_table(), (
        f"docs/deploy.md's settings table is out of date: run `{REGENERATE}`"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    replace_table(CLI_DOC, CLI_HEADING, cli_table())
    replace_table(DEPLOY_DOC, CONFIG_HEADING, config_table())
    from evalkit.cli import help_pages

    help_pages.write()
    print(f"rewrote the tables in {CLI_DOC.name} and {DEPLOY_DOC.name}, and the help pages")
