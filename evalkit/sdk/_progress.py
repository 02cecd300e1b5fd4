"""A progress bar on stderr (a line per tenth when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    def __init__(self, total: int, label: str, *, enabled: bool = True) -> None:
        self.total = max(total, 0)
        self.label = label
        self.enabled = enabled and self.total > 0
        self.done = 0
        self.failed = 0
        self._bar: Any = None
        self._task: Any = None
        self._next_line = 0.1
        self._started = time.monotonic()
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._task = self._bar.add_task(label, total=self.total, failed="")
            self._bar.start()

    def advance(self, *, failed: bool = False) -> None:
        if not self.enabled:
            return
        self.done += 1
        self.failed += failed
        if self._bar is not None:
            note = f"{self.failed} failed" if self.failed else ""
            self._bar.update(self._task, advance=1, failed=note)
        elif self.done >= self.total * self._next_line or self.done == self.total:
            self._next_line = (self.done / self.total) + 0.1
            failed_text = f", {self.failed} failed" if self.failed else ""
            print(
                f"{self.label}: {self.done}/{self.total}{failed_text} "
                f"({time.monotonic() - self._started:.1f} s)",
                file=sys.stderr,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
