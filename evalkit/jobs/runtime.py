"""What jobs reach at run time: the worker's database, settings, and the clients built
from them once per process (the outbound HTTP clients, the blob store, the secret box)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from evalkit.auth.secrets import SecretBox
from evalkit.blobs import BlobStore, fixture_key, open_blob_store
from evalkit.config import Settings
from evalkit.db import Database
from evalkit.http1 import Http1Client
from evalkit.outbound import make_client
from evalkit.store.agents import key_context

_state: dict[str, Any] = {}


def install(db: Database, settings: Settings) -> None:
    _state.clear()
    _state["db"], _state["settings"] = db, settings


def database() -> Database:
    db = _state.get("db")
    if not isinstance(db, Database):
        raise RuntimeError(
            "the worker runtime is not installed; start jobs through `evalkit worker`"
        )
    return db


def settings() -> Settings:
    value = _state.get("settings")
    assert isinstance(value, Settings)
    return value


def harness_http() -> Http1Client:
    """One pooled client for every Harness API call of this process (the runs' hot path,
    see :mod:`evalkit.http1`), under the egress policy."""
    if "harness_http" not in _state:
        worker = settings().worker
        _state["harness_http"] = Http1Client(
            settings().egress,
            timeout=worker.harness_timeout_seconds,
            max_connections=max(worker.concurrency * 2, 20),
        )
    return _state["harness_http"]  # type: ignore[no-any-return]


def http_client() -> httpx.AsyncClient:
    """One pooled httpx client for this process's other outbound calls (the judge and remote
    evaluators), under the egress policy."""
    if "http" not in _state:
        worker = settings().worker
        _state["http"] = make_client(
            settings().egress,
            timeout=worker.harness_timeout_seconds,
            max_connections=max(worker.concurrency * 2, 20),
        )
    return _state["http"]  # type: ignore[no-any-return]


def secret_box() -> SecretBox:
    if "box" not in _state:
        _state["box"] = SecretBox(settings().encryption_key)
    return _state["box"]  # type: ignore[no-any-return]


def blob_store() -> BlobStore:
    if "blobs" not in _state:
        _state["blobs"] = open_blob_store(settings().resolved_blob_url)
    return _state["blobs"]  # type: ignore[no-any-return]


def agent_key(agent_id: int, stored: str | None) -> str | None:
    """The agent's decrypted harness key (``stored``: its ciphertext, None when it has none)."""
    return None if stored is None else secret_box().decrypt(stored, key_context(agent_id))


async def fixture_bytes(sha256: str) -> bytes:
    def read() -> bytes:
        with blob_store().open(fixture_key(sha256)) as handle:
            return handle.read()

    return await asyncio.to_thread(read)


async def close() -> None:
    for name in ("harness_http", "http"):
        client = _state.pop(name, None)
        if client is not None:
            await client.aclose()
