"""The console cyclopts prints help pages and ``--version`` to (imported only for them)."""

from __future__ import annotations

import errno
import os

from rich.console import Console

from evalkit.cli.help_pages import WIDTH


class StdoutConsole(Console):
    """stdout, at most WIDTH columns wide: the width of the pages in help_pages.json, so a
    page looks the same whether it was printed from there or drawn now (on a terminal
    narrower than that, it is drawn to fit)."""

    def __init__(self) -> None:
        super().__init__()
        if self.width > WIDTH:
            self.width = WIDTH

    def on_broken_pipe(self) -> None:
        # Rich exits 1 on a broken pipe; this hands the error to run(), which ends every
        # command the same way on a closed pipe.
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
