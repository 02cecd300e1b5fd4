"""What an importer reads from a peer (Phoenix, Langfuse) before it becomes case files.

Exceptions raised by ``evalkit.importers``::

    EvalkitError (evalkit.errors)
    └── ImportFailed             the import cannot go on; the message says why and what to do
        └── PeerRefused          the peer answered with an error; ``status`` and ``answer``
                                 hold its status code and what it said
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalkit.errors import EvalkitError

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: called as examples are read and files written."""


Notice = Callable[[str], None]
"""``notice(line)``: something the user should hear about while it happens (a wait)."""


def no_progress(stage: str, done: int, total: int) -> None:
    del stage, done, total


def no_notice(line: str) -> None:
    del line


@dataclass(frozen=True)
class PeerExample:
    """One example (Phoenix) or dataset item (Langfuse), as the peer served it."""

    id: str
    """The peer's id of the example; kept in the case as ``metadata.imported_from.id``."""
    input: Any
    expected: Any
    """Phoenix's ``output``, Langfuse's ``expectedOutput``; None when there is none."""
    metadata: Any
    splits: list[str] = field(default_factory=list)
    """The peer's own splits the example belongs to (Phoenix); empty for Langfuse."""
    unmapped: dict[str, Any] = field(default_factory=dict)
    """The peer's other fields, kept under ``metadata.imported_from.unmapped``."""


@dataclass
class PeerDataset:
    """A dataset read from a peer, at one version, with all its examples."""

    peer: str
    """``phoenix`` or ``langfuse``."""
    url: str
    name: str
    id: str
    version: str | None
    """The version read (Phoenix: its version id; Langfuse: the timestamp asked for, or
    None for the latest)."""
    record: dict[str, Any]
    """The peer's own description of the dataset, as served (name, description, metadata,
    schemas, ...): written to the suite's ``.evalkit-import.yaml``."""
    examples: list[PeerExample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the reader had to work around, in one line each (shown to the user)."""


class ImportFailed(EvalkitError):
    """The import cannot go on; the message names the thing, the rule and the fix."""


class PeerRefused(ImportFailed):
    """The peer answered a request with an error status."""

    def __init__(self, message: str, *, status: int, answer: str, json_body: bool) -> None:
        super().__init__(message)
        self.status = status
        self.answer = answer
        self.json_body = json_body
        """Whether the body was JSON: an API's own refusal, not a proxy's or router's page."""
