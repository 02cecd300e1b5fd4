"""Blob stores for fixture bytes: a ``file://`` directory or a ``gs://bucket/prefix``.

Keys are content-addressed (``fixtures/ab/<sha256>``), so the same bytes always land under the
same key and different bytes never share one: two branches cannot overwrite each other.
Stores are synchronous; the edge calls them in a worker thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import unquote, urlsplit

from evalkit.errors import ConfigError


class BlobStore(Protocol):
    url: str

    def exists(self, key: str) -> bool:
        """Whether bytes are stored under ``key``."""
        ...

    def put_file(self, key: str, path: Path) -> bool:
        """Store the file's bytes under ``key`` unless something is there already.

        Returns False when the key existed (content-addressed: it holds the same bytes).
        """
        ...

    def open(self, key: str) -> BinaryIO:
        """The bytes under ``key``, as a readable binary file."""
        ...

    def delete(self, key: str) -> None: ...


def fixture_key(sha256: str) -> str:
    return f"fixtures/{sha256[:2]}/{sha256}"


def open_blob_store(url: str) -> BlobStore:
    """The store for ``blob_url``: ``file:///dir`` or ``gs://bucket[/prefix]``."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        from evalkit.blobs.files import FileBlobStore

        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"blob_url {url!r}: a file:// URL names a local path (file:///dir)")
        return FileBlobStore(Path(unquote(parts.path)))
    if parts.scheme == "gs":
        from evalkit.blobs.gcs import GcsBlobStore

        if not parts.netloc:
            raise ConfigError(f"blob_url {url!r} names no bucket: write gs://BUCKET/PREFIX")
        return GcsBlobStore(parts.netloc, parts.path.strip("/"))
    raise ConfigError(
        f"blob_url {url!r} is not supported: use file:///path/to/dir or gs://bucket/prefix"
    )


__all__ = ["BlobStore", "fixture_key", "open_blob_store"]
