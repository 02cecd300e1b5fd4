"""A case's input files on this machine: downloaded once by content hash, then reused."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import platformdirs

from evalkit.model.harness import InputFile
from evalkit.sdk._link import SdkLink
from evalkit.sdk._model import Fixture, SdkError

CACHE_ENV = "EVALKIT_CACHE_DIR"


def cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("evalkit"))


class FixtureCache:
    """Downloads each fixture (by sha256) at most once per process and keeps it on disk
    under ``<cache>/fixtures/<sha256>/<key>``."""

    def __init__(self, link: SdkLink, root: Path | None = None) -> None:
        self.link = link
        self.root = (root or cache_dir()) / "fixtures"
        self._locks: dict[str, asyncio.Lock] = {}

    async def files(self, pins: list[InputFile]) -> list[Fixture]:
        return [await self.one(pin) for pin in pins]

    async def one(self, pin: InputFile) -> Fixture:
        path = self.root / pin.sha256 / _safe(pin.name)
        lock = self._locks.setdefault(pin.sha256 + pin.name, asyncio.Lock())
        async with lock:
            if not (path.is_file() and path.stat().st_size == pin.size):
                data = await self.link.fixture(pin.sha256)
                if hashlib.sha256(data).hexdigest() != pin.sha256:
                    raise SdkError(
                        f"fixture {pin.name} came back with other bytes than its sha256 "
                        f"{pin.sha256[:12]}...; try again (the download was damaged)"
                    )
                await asyncio.to_thread(_write, path, data)
        return Fixture(
            name=pin.name, path=path, context=pin.context, sha256=pin.sha256, size=pin.size
        )


def _safe(name: str) -> str:
    cleaned = name.replace("/", "_").replace("\\", "_").lstrip(".")
    return cleaned or "file"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
