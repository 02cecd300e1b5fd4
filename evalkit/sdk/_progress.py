"""Progress on stderr: a bar over the runs (a line per tenth when stderr is not a terminal),
and what the SDK waits for once the runs are handed to the server."""

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


class Waiting:
    """What the SDK waits for, and for how long, on stderr: a status line redrawn in place on
    a terminal; when stderr is piped, a plain line at most every ``every`` seconds. A wait
    over within ``grace`` seconds shows nothing."""

    def __init__(self, *, enabled: bool = True, every: float = 5.0, grace: float = 2.0) -> None:
        self.enabled = enabled
        self.every = every
        self.grace = grace
        self._started = time.monotonic()
        self._status: Any = None
        self._last_line: float | None = None
        self._shown = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def update(self, what: str | None, *, limit: float | None = None) -> None:
        """Say the SDK is waiting for ``what`` ("spans of 2 runs (run 12, 13)"); ``limit``:
        the longest it waits, when it is bounded. Call it on every poll."""
        elapsed = self.elapsed
        if not self.enabled or not what or elapsed < self.grace:
            return
        bound = f" of at most {limit:.0f} s" if limit is not None else ""
        text = f"waiting for {what}: {elapsed:.0f} s{bound}"
        self._shown = True
        if sys.stderr.isatty():
            if self._status is None:
                from rich.console import Console

                self._status = Console(stderr=True).status(text)
                self._status.start()
            else:
                self._status.update(text)
            return
        now = time.monotonic()
        if self._last_line is None or now - self._last_line >= self.every:
            self._last_line = now
            say(text)

    def close(self, outcome: str = "done") -> None:
        """End the wait; once something was shown, say how it ended and after how long."""
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._shown:
            say(f"{outcome} after {self.elapsed:.0f} s of waiting")
            self._shown = False


def runs_text(run_ids: list[int], shown: int = 5) -> str:
    """``3 runs (run 12, 13, 14)``; past ``shown`` ids, ``and N more``."""
    ids = sorted(run_ids)
    listed = ", ".join(str(i) for i in ids[:shown])
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    noun = "run" if len(ids) == 1 else "runs"
    return f"{len(ids)} {noun} (run {listed}{more})"
