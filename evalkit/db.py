"""The connection layer: a psycopg pool and a few async verbs over named SQL statements.

Nothing above this module sees psycopg: integrity errors become :class:`IntegrityError`
carrying the constraint name, values the database cannot hold become :class:`ValueRefused`,
connection failures become :class:`DatabaseError`.

Large JSON documents (trajectories) pass through as text: :class:`JsonBytes` sends bytes
that already are JSON as a ``jsonb`` parameter, and :meth:`Conn.one_json_bytes` returns
``json`` columns as their text's bytes, for the caller to decode into its own types.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import Dumper, Loader
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from evalkit.errors import DatabaseError, EvalkitError
from evalkit.sql import queries

Row = dict[str, Any]


class JsonBytes:
    """A ``jsonb`` parameter given as the bytes of its JSON text, sent as they are (no decode
    and encode again: a str of a large document takes up to 4 bytes a character)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class _JsonBytesDumper(Dumper):
    oid = psycopg.adapters.types["jsonb"].oid

    def dump(self, obj: JsonBytes) -> bytes:
        return obj.data


class _JsonBytesLoader(Loader):
    def load(self, data: Buffer) -> bytes:
        return bytes(data)


psycopg.adapters.register_dumper(JsonBytes, _JsonBytesDumper)


class IntegrityError(EvalkitError):
    """A constraint refused a write; ``constraint`` names it (e.g. ``users_username_key``)."""

    def __init__(self, constraint: str, message: str) -> None:
        super().__init__(message)
        self.constraint = constraint


class ValueRefused(DatabaseError):
    """A value the database cannot hold: text with a NUL character, a number out of its
    column's range, text that is not the type it is cast to (SQLSTATE class 22, data
    exception). It comes from what a caller sent, so the edge answers 400, not 503."""


def _value_refused(exc: psycopg.DataError) -> ValueRefused:
    # psycopg refuses NUL in text before sending it; PostgreSQL refuses \u0000 in JSON.
    if "NUL (0x00)" in str(exc) or "\\u0000" in (exc.diag.message_detail or ""):
        return ValueRefused(
            "a text value holds a NUL character (\\u0000), which evalkit cannot store; remove it"
        )
    primary = exc.diag.message_primary or str(exc)
    return ValueRefused(f"a value does not fit what evalkit stores ({primary}); fix it")


class Conn:
    """One connection, with the verbs the store layer uses."""

    def __init__(self, raw: psycopg.AsyncConnection[Row]) -> None:
        self.raw = raw

    async def one(self, query: str, /, **params: Any) -> Row | None:
        async with self._run(query, params) as cur:
            return await cur.fetchone()

    async def one_json_bytes(self, query: str, /, **params: Any) -> Row | None:
        """:meth:`one`, with each ``json`` column (``x::json``, not ``jsonb``) as the bytes
        of its text: the caller decodes it into its own types, with no generic copy."""
        async with self._run(query, params, json_bytes=True) as cur:
            return await cur.fetchone()

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        async with self._run(query, params) as cur:
            return await cur.fetchall()

    async def execute(self, query: str, /, **params: Any) -> int:
        async with self._run(query, params) as cur:
            return cur.rowcount

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """Statements in one transaction (a savepoint when one is already open)."""
        async with self.raw.transaction():
            yield self

    @asynccontextmanager
    async def _run(
        self, name: str, params: dict[str, Any], *, json_bytes: bool = False
    ) -> AsyncIterator[psycopg.AsyncCursor[Row]]:
        try:
            async with self.raw.cursor() as cur:
                if json_bytes:
                    cur.adapters.register_loader("json", _JsonBytesLoader)
                await cur.execute(queries[name], params)
                yield cur
        except psycopg.errors.IntegrityError as exc:
            constraint = exc.diag.constraint_name or ""
            raise IntegrityError(constraint, f"{name}: {exc.diag.message_primary}") from exc
        except psycopg.DataError as exc:
            raise _value_refused(exc) from exc
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"the database did not answer ({exc}); is it running?") from exc
        except psycopg.Error as exc:
            raise DatabaseError(f"{name} failed: {exc}") from exc


class Database:
    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Row]] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row, "autocommit": True},
            open=False,
            name="evalkit",
        )
        self._checking: asyncio.Task[None] | None = None

    async def open(self, timeout: float = 10.0) -> None:
        try:
            await self.pool.open(wait=True, timeout=timeout)
        except Exception as exc:
            raise DatabaseError(f"cannot connect to the database: {exc}") from exc

    async def close(self) -> None:
        if self._checking is not None and not self._checking.done():
            self._checking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checking
        await self.pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A connection in autocommit mode: each statement commits on its own."""
        async with self._checkout() as raw:
            yield Conn(raw)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """A connection inside one transaction, committed on success, rolled back on error."""
        async with self._checkout() as raw, raw.transaction():
            yield Conn(raw)

    @asynccontextmanager
    async def _checkout(self) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        try:
            async with self.pool.connection(timeout=10.0) as raw:
                try:
                    yield raw
                except psycopg.OperationalError as exc:
                    # BEGIN or COMMIT (outside Conn's verbs) on a connection that died
                    if raw.broken:
                        self._check_idle()
                    raise DatabaseError(
                        f"the database did not answer ({exc}); is it running?"
                    ) from exc
                except (DatabaseError, psycopg.Error):
                    if raw.broken:
                        self._check_idle()
                    raise
        except PoolTimeout as exc:
            raise DatabaseError("no database connection within 10 s; is the database up?") from exc

    def _check_idle(self) -> None:
        """A connection broke under a statement: the database restarted, failed over or
        dropped it, and then the idle ones in the pool are most likely dead too. Test them
        all now, in the background, replacing the dead, rather than fail one request for
        each (a test on every checkout would cost a round trip on every request)."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check_pool())

    async def _check_pool(self) -> None:
        with contextlib.suppress(Exception):  # the pool logs what it could not replace
            await self.pool.check()
