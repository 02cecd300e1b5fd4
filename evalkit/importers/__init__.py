"""Bring datasets over from Arize Phoenix and Langfuse: one case file per example.

Each peer has its reader (``phoenix.read_dataset``, ``langfuse.read_dataset``), which reads
the dataset through the peer's public HTTP API into a ``PeerDataset``; ``writer`` turns that
into case files of a suite (``plan_import``, then ``apply``). ``evalkit import`` (the CLI's
``evalkit/cli/importing.py``) puts them together. docs/coming-from-phoenix-langfuse.md is the
user's page: the field-by-field mapping and what evalkit does differently.

The readers use httpx only; no Phoenix or Langfuse client is a dependency of evalkit.
"""

from evalkit.importers._model import (
    ImportFailed,
    PeerDataset,
    PeerExample,
    PeerRefused,
    Progress,
)

__all__ = ["ImportFailed", "PeerDataset", "PeerExample", "PeerRefused", "Progress"]
