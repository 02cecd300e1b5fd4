"""What jobs reach at run time: the worker's database, settings, and the clients built
from them once per process (the outbound HTTP clients, the blob store, the secret box)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar, cast

import httpx

from evalkit.auth.secrets import SecretBox
from evalkit.blobs import BlobStore, fixture_key, open_blob_store
from evalkit.config import Settings
from evalkit.db import Database
from evalkit.http1 import Http1Client
from evalkit.outbound import make_client
from evalkit.store.agents import key_context

_state: dict[str, Any] = {}

T = TypeVar("T")


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
    return kept(
        "harness_http",
        lambda: Http1Client(
            settings().egress,
            timeout=settings().worker.harness_timeout_seconds,
            max_connections=_connections(),
        ),
    )


def http_client() -> httpx.AsyncClient:
    """One pooled httpx client for this process's other outbound calls (the judge and remote
    evaluators), under the egress policy."""
    return kept(
        "http",
        lambda: make_client(
            settings().egress,
            timeout=settings().worker.harness_timeout_seconds,
            max_connections=_connections(),
        ),
    )


def secret_box() -> SecretBox:
    return kept("box", lambda: SecretBox(settings().encryption_key))


def blob_store() -> BlobStore:
    return kept("blobs", lambda: open_blob_store(settings().resolved_blob_url))


def kept(name: str, make: Callable[[], T]) -> T:
    """The process's one ``name``, made by ``make`` the first time it is asked for."""
    if name not in _state:
        _state[name] = make()
    return cast(T, _state[name])


def _connections() -> int:
    return max(settings().worker.concurrency * 2, 20)


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
