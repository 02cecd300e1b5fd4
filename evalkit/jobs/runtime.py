"""What jobs reach at run time: the worker's database handle and settings."""

from __future__ import annotations

from evalkit.config import Settings
from evalkit.db import Database

_state: dict[str, object] = {}


def install(db: Database, settings: Settings) -> None:
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
