"""The connection layer: a psycopg pool and a few async verbs over named SQL statements.

Nothing above this module sees psycopg: integrity errors become :class:`IntegrityError`
carrying the constraint name, values the database cannot hold become :class:`ValueRefused`,
connection failures become :class:`DatabaseError`.

Large JSON documents (trajectories) pass through as text: :class:`JsonBytes` sends bytes
that already are JSON as a ``jsonb`` parameter, and :meth:`Conn.one_decoding_json` hands
``json`` columns to the caller's decoder straight from the received buffer. libpq keeps its
send and receive buffers as large as the largest message a connection carried, for as long
as the connection lives, so a connection that carried one over :data:`LARGE_MESSAGE_BYTES`
is closed when it is given back (the pool opens a new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
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

__all__ = ["Buffer", "Conn", "Database", "IntegrityError", "JsonBytes", "Row", "ValueRefused"]


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


def _json_loader(
    decode: Callable[[Buffer], Any], raw: psycopg.AsyncConnection[Any]
) -> type[Loader]:
    class DecodingLoader(Loader):
        def load(self, data: Buffer) -> Any:
            if len(data) > LARGE_MESSAGE_BYTES:
                _oversized.add(raw)
            return decode(data)

    return DecodingLoader


LARGE_MESSAGE_BYTES = 2**20
"""A connection that sent or received a value this large is replaced once given back."""
_oversized: weakref.WeakSet[psycopg.AsyncConnection[Any]] = weakref.WeakSet()


def _retire(raw: psycopg.AsyncConnection[Any]) -> None:
    """Have the pool close ``raw`` when it comes back, as it closes one past its
    ``max_lifetime`` (and open another): psycopg_pool has no public call for one connection,
    and closing it here would log it as broken. tests/integration/test_db_buffers.py fails
    if a psycopg_pool upgrade stops honouring it."""
    raw._expire_at = 0.0


IDLE_CHECK_SECONDS = 2.0
"""A pooled connection unused this long is tested (an empty query) before it is handed out:
the database may have restarted meanwhile. One in steady use is not."""
_last_used: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
    weakref.WeakKeyDictionary()
)


async def _check_if_idle(raw: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check on checkout: a connection that raises is dropped and another taken.
    Without it, a connection that died while idle (a database restart) fails the request
    that draws it, in every edge process, before the pool is tested (``_check_idle``)."""
    last = _last_used.get(raw)
    if last is not None and time.monotonic() - last < IDLE_CHECK_SECONDS:
        return
    await AsyncConnectionPool.check_connection(raw)


async def _send(cur: psycopg.AsyncCursor[Row], name: str, each: Sequence[dict[str, Any]]) -> None:
    if len(each) > 1:
        await cur.executemany(queries[name], each, returning=True)
    else:
        await cur.execute(queries[name], each[0])


def _large(value: object) -> bool:
    if isinstance(value, JsonBytes):
        value = value.data
    return isinstance(value, str | bytes) and len(value) > LARGE_MESSAGE_BYTES


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

    def __init__(self, raw: psycopg.AsyncConnection[Row], *, begin_pending: bool = False) -> None:
        self.raw = raw
        self._begin_pending = begin_pending
        """A transaction whose BEGIN is sent with the first statement (one round trip)."""
        self._began: psycopg.AsyncTransaction | None = None

    async def one(self, query: str, /, **params: Any) -> Row | None:
        async with self._run(query, params) as cur:
            return await cur.fetchone()

    async def each(self, query: str, params: Sequence[dict[str, Any]], /) -> list[Row | None]:
        """:meth:`one` for each of ``params``, in order, sent together: one round trip for
        all of them (psycopg's pipeline), not one each."""
        if not params:
            return []
        async with self._run(query, params) as cur:
            found = [await cur.fetchone()]
            while cur.nextset():
                found.append(await cur.fetchone())
            return found

    async def one_and_commit(self, query: str, /, **params: Any) -> Row | None:
        """:meth:`one` as the last statement of a :meth:`Database.pipelined_transaction`,
        sent with the COMMIT: one round trip. When either fails, the transaction is rolled
        back and the statement's error raised. Before the transaction's first statement
        (it has not begun), or outside one, just :meth:`one`: it commits on its own."""
        async with self._execute(query, params, commit=self._began is not None) as cur:
            return await cur.fetchone()

    async def one_decoding_json(
        self, query: str, decode: Callable[[Buffer], Any], /, **params: Any
    ) -> Row | None:
        """:meth:`one`, with each ``json`` column (``x::json``, not ``jsonb``) given by
        ``decode`` from its text as received (a view valid during the call): the caller
        decodes into its own types, with no copy of the text and no generic decode."""
        async with self._run(query, params, json=decode) as cur:
            return await cur.fetchone()

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        async with self._run(query, params) as cur:
            return await cur.fetchall()

    async def all_decoding_json(
        self, query: str, decode: Callable[[Buffer], Any], /, **params: Any
    ) -> list[Row]:
        """:meth:`all`, with each ``json`` column given by ``decode`` (see
        :meth:`one_decoding_json`)."""
        async with self._run(query, params, json=decode) as cur:
            return await cur.fetchall()

    async def execute(self, query: str, /, **params: Any) -> int:
        async with self._run(query, params) as cur:
            return cur.rowcount

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """Statements in one transaction (a savepoint when one is already open)."""
        if self._begin_pending:
            await self._begin()
        async with self.raw.transaction():
            yield self

    async def _begin(self) -> None:
        self._begin_pending = False
        # AsyncTransaction itself, not raw.transaction(): inside a pipeline that one holds
        # the pipeline open until the transaction ends, and COPY cannot run in a pipeline.
        began = psycopg.AsyncTransaction(self.raw)
        await began.__aenter__()
        self._began = began

    async def _end(self, exc: BaseException | None) -> None:
        """Commit (or, after ``exc``, roll back) the transaction begun by the first statement;
        nothing when no statement ran."""
        began, self._began = self._began, None
        self._begin_pending = False
        if began is not None:
            await began.__aexit__(
                type(exc) if exc else None, exc, exc.__traceback__ if exc else None
            )

    async def _send_and_commit(
        self, cur: psycopg.AsyncCursor[Row], name: str, each: Sequence[dict[str, Any]]
    ) -> None:
        """The statement, the COMMIT and a Sync in one pipeline. Should the statement fail,
        the pipeline skips the COMMIT and the transaction is left failed: roll it back."""
        try:
            async with self._pipeline():
                await _send(cur, name, each)
                await self._end(None)
        except BaseException:
            if self.raw.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                await self.raw.rollback()
            raise

    @asynccontextmanager
    async def _pipeline(self) -> AsyncIterator[None]:
        """psycopg's pipeline, raising a failed statement's own error. The commands queued
        after it are skipped, and when their results arrive apart from the error, psycopg
        raises PipelineAborted for them while it handles the error."""
        try:
            async with self.raw.pipeline():
                yield
        except psycopg.errors.PipelineAborted as exc:
            if isinstance(exc.__context__, psycopg.Error):
                raise exc.__context__ from None
            raise

    @asynccontextmanager
    async def _run(
        self,
        name: str,
        params: dict[str, Any] | Sequence[dict[str, Any]],
        *,
        json: Callable[[Buffer], Any] | None = None,
    ) -> AsyncIterator[psycopg.AsyncCursor[Row]]:
        async with self._execute(name, params, json=json, begin=self._begin_pending) as cur:
            yield cur

    @asynccontextmanager
    async def _execute(
        self,
        name: str,
        params: dict[str, Any] | Sequence[dict[str, Any]],
        *,
        json: Callable[[Buffer], Any] | None = None,
        begin: bool = False,
        commit: bool = False,
    ) -> AsyncIterator[psycopg.AsyncCursor[Row]]:
        """Run statement ``name`` with ``params``, or once for each of a sequence of them
        (the results one set each, in order); with ``begin``, after a BEGIN sent with it;
        with ``commit``, followed by the COMMIT of the transaction begun, sent with it."""
        each: Sequence[dict[str, Any]] = [params] if isinstance(params, dict) else params
        if any(_large(value) for one in each for value in one.values()):
            _oversized.add(self.raw)
        try:
            async with self.raw.cursor() as cur:
                if json is not None:
                    cur.adapters.register_loader("json", _json_loader(json, self.raw))
                if begin:
                    # BEGIN, the statement and a Sync go out together, and the pipeline's
                    # end reads every result: one round trip. (Reading rows inside the
                    # pipeline would ask for them first, then sync: two.)
                    async with self._pipeline():
                        await self._begin()
                        await _send(cur, name, each)
                elif commit:
                    await self._send_and_commit(cur, name, each)
                else:
                    await _send(cur, name, each)
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
            check=_check_if_idle,
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
    async def pipelined_transaction(self) -> AsyncIterator[Conn]:
        """:meth:`transaction`, whose BEGIN goes with its first statement, in one round trip
        (psycopg's pipeline mode): for a hot path where a round trip shows."""
        async with self._checkout() as raw:
            conn = Conn(raw, begin_pending=True)
            try:
                yield conn
            except BaseException as exc:
                await conn._end(exc)
                raise
            await conn._end(None)

    @asynccontextmanager
    async def _checkout(self) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        try:
            async with self.pool.connection(timeout=10.0) as raw:
                try:
                    yield raw
                    _last_used[raw] = time.monotonic()
                    if raw in _oversized:
                        _retire(raw)
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
