"""The one table from evalkit's exceptions to the edge's refusals.

Each row says, for an exception type, the status, the error code and the message the edge
answers with. The API (``endpoint.py``), the OTLP collector (``routes/otel.py``) and the web
pages (``web/page.py``) look the exception up here and only put the refusal in their own
format: evalkit's JSON error, a ``google.rpc.Status``, an HTML page. What they add on
purpose: the collector sends Retry-After on a 503 (``collector_retry_after``: OTLP exporters
retry a 503 after it) and cuts long messages; a page answers a lost login with the login page.

An exception no row names (a ``ConfigError``, a bug) is not a refusal: it reaches the app's
handler of unhandled errors, which logs it and answers 500.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalkit.db import IntegrityError, ValueRefused
from evalkit.errors import ApiError, DatabaseError

RETRY_AFTER_DATABASE = 5
"""Seconds the collector asks an exporter to wait before resending when the database is down."""


@dataclass(frozen=True)
class Refusal:
    """An answer other than success, before it is put in a format."""

    status: int
    code: str
    message: str
    retry_after: int | None = None
    """Seconds, sent as Retry-After in every format (too many attempts, a busy collector)."""
    collector_retry_after: int | None = None
    """Seconds sent as Retry-After by the collector only, where the API sends none."""

    @property
    def headers(self) -> dict[str, str]:
        return _headers(self.status, self.retry_after)

    @property
    def collector_headers(self) -> dict[str, str]:
        retry_after = self.retry_after
        if self.collector_retry_after is not None:
            retry_after = self.collector_retry_after
        return _headers(self.status, retry_after)


def _headers(status: int, retry_after: int | None) -> dict[str, str]:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return headers


def _refused_on_purpose(exc: ApiError) -> Refusal:
    """An ApiError carries its own status and code (a subclass's, or an instance's)."""
    return Refusal(exc.status, exc.code, exc.message, getattr(exc, "retry_after", None))


def _constraint_clash(exc: IntegrityError) -> Refusal:
    """A constraint caught what the store layer did not foresee (often a race)."""
    return Refusal(409, "conflict", f"{exc.message} ({exc.constraint})")


def _value_refused(exc: ValueRefused) -> Refusal:
    """What the caller sent, not the database being down: a retry would send it again."""
    return Refusal(400, "bad-value", exc.message)


def _database_unavailable(exc: DatabaseError) -> Refusal:
    return Refusal(
        503,
        "database-unavailable",
        exc.message,
        collector_retry_after=RETRY_AFTER_DATABASE,
    )


# First match wins: ValueRefused is a DatabaseError, so its row comes before its base's.
TABLE: tuple[tuple[type[Exception], Callable[[Any], Refusal]], ...] = (
    (ApiError, _refused_on_purpose),
    (IntegrityError, _constraint_clash),
    (ValueRefused, _value_refused),
    (DatabaseError, _database_unavailable),
)

REFUSED: tuple[type[Exception], ...] = tuple(kind for kind, _ in TABLE)
"""The exceptions the edge answers as refusals: ``except REFUSED as exc``."""


def refusal_for(exc: Exception) -> Refusal:
    for kind, refusal in TABLE:
        if isinstance(exc, kind):
            return refusal(exc)
    raise TypeError(f"{type(exc).__name__} is not a refusal (no row of refusals.TABLE)")
