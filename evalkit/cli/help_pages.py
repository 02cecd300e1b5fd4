"""Help pages drawn ahead of time, so that ``evalkit ... --help`` answers without cyclopts.

cyclopts and rich are some 300 modules by the time a help page is drawn (0.2 s or more),
and the pages only change with the code. So cyclopts draws every page once, into
help_pages.json (WIDTH columns, with the styles of a 256-colour terminal, and the codes
that differ on 16- and 24-bit ones), and ``evalkit [COMMAND ...] --help`` (or ``-h``, or
``evalkit`` alone) prints the page from there when this output is one that drawing fits:

- not a terminal (a pipe, CI, an editor): the page without its styles;
- a UTF-8 colour terminal at least WIDTH columns wide: the page as rich would style it
  there (it picks the colours from TERM and COLORTERM).

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
from typing import TYPE_CHECKING, Any

from evalkit.cli.output import is_broken_pipe, stdout_reader_gone

if TYPE_CHECKING:
    from cyclopts import App

WIDTH = 80
HELP_FLAGS = ("--help", "-h")
PAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "help_pages.json")
DRAWN_IN = "256"
"""The colour system the pages are drawn in; COLOUR_SYSTEMS differ from it in a few codes."""
COLOUR_SYSTEMS = ("standard", "256", "truecolor")
"""rich's names for 16-, 256- and 24-bit colour terminals."""
_SGR = "\x1b["  # the styles are Select Graphic Rendition sequences: ESC [ digits;... m
_FORCING = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")  # rich reads them; cyclopts answers


def print_page(argv: list[str]) -> bool:
    """Print the help page ``argv`` asks for, when it was drawn ahead of time for an output
    like this one; False: cyclopts is to answer."""
    if argv and argv[-1] not in HELP_FLAGS:
        return False
    colours = _colours_here()
    if colours is None:
        return False
    drawn = load()
    page = drawn["pages"].get(" ".join(argv[:-1]))
    if page is None:
        return False
    try:
        sys.stdout.write(styled(page, drawn, colours))
        sys.stdout.flush()
    except OSError as exc:
        if not is_broken_pipe(exc):
            raise
        stdout_reader_gone()
    return True


def load() -> dict[str, Any]:
    """``pages``: command path (``""`` for the root, ``"runs show"``) -> its page as drawn;
    ``recolour``: colour system -> {code as drawn: its code in that system}."""
    import json  # here: every command line passes through this module

    try:
        with open(PAGES, encoding="utf-8") as file:
            return json.load(file)  # type: ignore[no-any-return]
    except FileNotFoundError:  # a checkout that has not drawn them: cyclopts answers
        return {"pages": {}, "recolour": {}}


def styled(page: str, drawn: dict[str, Any], colours: str) -> str:
    """The page as rich prints it in the colour system ``colours`` (``""``: off a
    terminal, where it has no styles)."""
    if colours == DRAWN_IN:
        return page
    first, *rest = page.split(_SGR)
    codes = drawn["recolour"].get(colours, {}) if colours else {}
    parts = [first]
    for part in rest:
        end = part.index("m") + 1
        if colours:
            parts.append(_SGR + codes.get(part[:end], part[:end]))
        parts.append(part[end:])
    return "".join(parts)


def without_styles(page: str) -> str:
    return styled(page, {}, "")


def _colours_here() -> str | None:
    """The colour system rich would print this stdout in (``""``: none, it is no terminal),
    when it draws the pages as they were drawn ahead; None: let it draw them now."""
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
    if not terminal:
        return ""
    term = os.environ.get("TERM", "").strip().lower()
    if term in ("dumb", "unknown"):
        return None
    if os.environ.get("COLORTERM", "").strip().lower() in ("truecolor", "24bit"):
        return "truecolor"
    return "256" if term.rpartition("-")[2] in ("256color", "kitty") else "standard"


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


def draw(path: list[str], colours: str = DRAWN_IN) -> str:
    """The help page of the command at ``path`` as cyclopts draws it now, for a terminal
    of the colour system ``colours`` (``""``: off a terminal). Rich keeps a style's codes
    once it has made them, so a process draws in one colour system only."""
    import io

    from rich.console import Console

    from evalkit.cli.app import app

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=WIDTH,
        force_terminal=bool(colours),
        color_system=colours or None,  # type: ignore[arg-type]
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


def draw_all(colours: str = DRAWN_IN) -> dict[str, str]:
    return {" ".join(path): draw(path, colours) for path in command_paths()}


def draw_all_elsewhere(colours: str) -> dict[str, str]:
    """draw_all in a process of its own (see draw)."""
    import json
    import subprocess

    script = "import json, sys; from evalkit.cli import help_pages as h; "
    script += "json.dump(h.draw_all(sys.argv[1]), sys.stdout)"
    done = subprocess.run(
        [sys.executable, "-c", script, colours], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def recolouring(pages: dict[str, str], other: dict[str, str]) -> dict[str, str]:
    """{code in ``pages``: the code in the same place of ``other``}: the pages are the
    same text, styled in two colour systems."""
    codes: dict[str, str] = {}
    for path, page in pages.items():
        if without_styles(page) != without_styles(other[path]):
            raise ValueError(f"the help page of {path!r} is another text in another colour")
        for a, b in zip(page.split(_SGR)[1:], other[path].split(_SGR)[1:], strict=True):
            a, b = a[: a.index("m") + 1], b[: b.index("m") + 1]
            if codes.setdefault(a, b) != b:
                raise ValueError(f"{a!r} is {codes[a]!r} and {b!r} in another colour system")
    return {a: b for a, b in sorted(codes.items()) if a != b}


def write() -> None:
    import json

    pages = draw_all_elsewhere(DRAWN_IN)
    recolour = {
        colours: recolouring(pages, draw_all_elsewhere(colours))
        for colours in COLOUR_SYSTEMS
        if colours != DRAWN_IN
    }
    text = json.dumps(
        {"recolour": recolour, "pages": pages}, indent=0, sort_keys=True, ensure_ascii=False
    )
    with open(PAGES, "w", encoding="utf-8") as file:
        file.write(text + "\n")
