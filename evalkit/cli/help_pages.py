"""Help pages drawn ahead of time, so that ``evalkit ... --help`` answers without cyclopts.

cyclopts and rich are some 300 modules by the time a help page is drawn (0.2 s or more),
and the pages only change with the code. So cyclopts draws every page once, into
help_pages.json (WIDTH columns, with the styles a colour terminal gets), and
``evalkit [COMMAND ...] --help`` (or ``-h``, or ``evalkit`` alone) prints the page from
there when this output is one that drawing fits:

- not a terminal (a pipe, CI, an editor): the page without its styles;
- a UTF-8 colour terminal at least WIDTH columns wide: the page as drawn.

Anything else goes to cyclopts, which draws the page now: a narrower terminal, NO_COLOR,
FORCE_COLOR, Windows, a command line that is not exactly a command and the help flag. On a
wider terminal cyclopts draws WIDTH columns too (console.py), so both give the same page.

Regenerate the pages with docs/cli.md after changing a command, a flag or a help text:

    uv run python tests/unit/test_reference_docs.py

tests/unit/test_cli_start.py fails when a page differs from what cyclopts draws now.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from evalkit.cli.output import is_broken_pipe, stdout_reader_gone

if TYPE_CHECKING:
    from cyclopts import App

WIDTH = 80
HELP_FLAGS = ("--help", "-h")
PAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "help_pages.json")
_SGR = "\x1b["  # the styles are Select Graphic Rendition sequences: ESC [ digits;... m
_FORCING = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")  # rich reads them; so cyclopts answers


def print_page(argv: list[str]) -> bool:
    """Print the help page ``argv`` asks for, when it was drawn ahead of time for an output
    like this one; False: cyclopts is to answer."""
    if argv and argv[-1] not in HELP_FLAGS:
        return False
    styled = _styled_here()
    if styled is None:
        return False
    page = load().get(" ".join(argv[:-1]))
    if page is None:
        return False
    try:
        sys.stdout.write(page if styled else without_styles(page))
        sys.stdout.flush()
    except OSError as exc:
        if not is_broken_pipe(exc):
            raise
        stdout_reader_gone()
    return True


def load() -> dict[str, str]:
    """Command path (``""`` for the root, ``"runs show"``) -> its page as drawn."""
    import json  # here: every command line passes through this module

    try:
        with open(PAGES, encoding="utf-8") as file:
            pages: dict[str, str] = json.load(file)
    except FileNotFoundError:  # a checkout that has not drawn them: cyclopts answers
        return {}
    return pages


def without_styles(page: str) -> str:
    """The page as rich prints it off a terminal: the same text without its styles."""
    first, *styled = page.split(_SGR)
    return first + "".join(part[part.index("m") + 1 :] for part in styled)


def _styled_here() -> bool | None:
    """True: stdout is a colour terminal that shows a drawn page as rich would draw it;
    False: it is no terminal, and shows the page without styles; None: draw it now."""
    if sys.platform == "win32" or any(name in os.environ for name in _FORCING):
        return None
    stdout = sys.stdout
    if not (getattr(stdout, "encoding", None) or "").lower().startswith("utf"):
        return None  # rich would draw the boxes in ASCII
    if _terminal_width() < WIDTH:
        return None
    try:
        terminal = stdout.isatty()
    except (AttributeError, ValueError):
        return None
    if terminal and os.environ.get("TERM", "").lower() in ("dumb", "unknown"):
        return None
    return terminal


def _terminal_width() -> int:
    """The width rich gives a console: the first standard stream that is a terminal, else
    COLUMNS, else 80."""
    width = 0
    for descriptor in (0, 1, 2):
        try:
            width = os.get_terminal_size(descriptor).columns
        except (AttributeError, ValueError, OSError):
            continue
        break
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        width = int(columns)
    return width or 80


# ---------------------------------------------------------------------------- drawing


def draw(path: list[str], *, styled: bool = True, color_system: str = "standard") -> str:
    """The help page of the command at ``path``, as cyclopts draws it now."""
    import io

    from rich.console import Console

    from evalkit.cli.app import app

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=WIDTH,
        force_terminal=styled,
        color_system=color_system if styled else None,  # type: ignore[arg-type]
        legacy_windows=False,
        _environ={},
    )
    app.help_print(path, console=console)
    return buffer.getvalue()


def command_paths() -> list[list[str]]:
    """Every shown command and group, the root (``[]``) first."""
    from evalkit.cli.app import app, load_commands

    load_commands()
    found: list[list[str]] = []

    def walk(group: App, path: list[str]) -> None:
        found.append(path)
        for name in group:
            sub = group[name]
            if not name.startswith("-") and sub is not group and sub.show:
                walk(sub, [*path, name])

    walk(app, [])
    return found


def draw_all() -> dict[str, str]:
    return {" ".join(path): draw(path) for path in command_paths()}


def write() -> None:
    import json

    text = json.dumps(draw_all(), indent=0, sort_keys=True, ensure_ascii=False)
    with open(PAGES, "w", encoding="utf-8") as file:
        file.write(text + "\n")
