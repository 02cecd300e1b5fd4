"""A blob store in a Google Cloud Storage bucket (google-cloud-storage).

Credentials come from the environment (Application Default Credentials). With
``STORAGE_EMULATOR_HOST`` set, the client talks to that emulator anonymously.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any, BinaryIO


class GcsBlobStore:
    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        from google.cloud import storage

        if client is None:
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(project="evalkit", credentials=AnonymousCredentials())
            else:
                client = storage.Client()
        self.client = client
        self.bucket = client.bucket(bucket)
        self.prefix = prefix
        self.url = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def exists(self, key: str) -> bool:
        return bool(self.bucket.blob(self._name(key)).exists())

    def put_file(self, key: str, path: Path) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(self._name(key))
        if blob.exists():
            return False
        try:
            # generation 0: only create, never replace what another writer stored
            blob.upload_from_filename(str(path), if_generation_match=0)
        except PreconditionFailed:
            return False
        return True

    def open(self, key: str) -> BinaryIO:
        return io.BytesIO(self.bucket.blob(self._name(key)).download_as_bytes())

    def delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        with contextlib.suppress(NotFound):
            self.bucket.blob(self._name(key)).delete()
