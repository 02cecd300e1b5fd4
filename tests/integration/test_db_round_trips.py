"""How often a transaction of ``evalkit.db`` waits for the database, counted from libpq's own
trace of the protocol messages: a round trip is each turn from the server's messages back
to the client's. A count is stable where a time is not."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

import psycopg
import pytest
from psycopg import pq

from evalkit import db
from evalkit.sql import queries


@pytest.fixture
async def database(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[db.Database]:
    monkeypatch.setitem(
        queries,
        "test_make_note",
        "CREATE TABLE IF NOT EXISTS test_notes (n int CHECK (n > 0))",
    )
    monkeypatch.setitem(
        queries,
        "test_add_note",
        "INSERT INTO test_notes VALUES (%(n)s) RETURNING n * 10 AS tenfold",
    )
    monkeypatch.setitem(queries, "test_count_notes", "SELECT n FROM test_notes ORDER BY n")
    database = db.Database(database_url, min_size=1, max_size=1)
    await database.open()
    async with database.connection() as conn:
        await conn.execute("test_make_note")
    yield database
    await database.close()


def traced(pgconn: pq.abc.PGconn, file: IO[str]) -> pq.abc.PGconn:
    """``pgconn``, its messages now written to ``file`` (until ``untrace``)."""
    pgconn.trace(file.fileno())
    pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
    return pgconn


TRACED_MESSAGE = re.compile(r"^[FB]\t\d+\t")


def round_trips(path: Path) -> list[list[str]]:
    """The client's messages of each round trip, in order: each its name, then what it
    carries as libpq traces it (``Parse\t"" "COMMIT" 0``)."""
    trips: list[list[str]] = []
    last = "B"
    for line in path.read_text().splitlines():
        if not TRACED_MESSAGE.match(line):
            continue  # a statement's text goes on over lines
        direction, _, message = line.split("\t", 2)
        if direction == "F":
            if last == "B":
                trips.append([])
            trips[-1].append(message)
        last = direction
    return trips


def names(trip: list[str]) -> list[str]:
    return [message.split("\t")[0] for message in trip]


async def two_notes(
    database: db.Database, path: Path, last_verb: str
) -> tuple[list[db.Row | None], list[list[str]]]:
    """Notes 1 and 2 added in one pipelined transaction, the second by ``last_verb`` (a
    ``Conn`` verb), traced to ``path``: the statements' rows and the round trips."""
    with path.open("w") as file:
        async with database.pipelined_transaction() as conn:
            pgconn = traced(conn.raw.pgconn, file)
            first = await conn.one("test_add_note", n=1)
            last = await getattr(conn, last_verb)("test_add_note", n=2)
        pgconn.untrace()
    return [first, last], round_trips(path)


async def test_a_pipelined_transaction_sends_begin_its_first_statement_and_sync_at_once(
    database: db.Database, tmp_path: Path
) -> None:
    rows, trips = await two_notes(database, tmp_path / "trace", "one")

    assert rows == [{"tenfold": 10}, {"tenfold": 20}]
    assert len(trips) == 3, trips  # BEGIN and the first statement; the second; COMMIT
    begin_and_first = names(trips[0])
    assert begin_and_first.count("Sync") == 1, begin_and_first
    assert "Flush" not in begin_and_first[: begin_and_first.index("Sync")], begin_and_first
    async with database.connection() as conn:
        kept = await conn.all("test_add_note", n=3)
    assert kept == [{"tenfold": 30}]


async def test_a_first_statement_refused_in_a_pipeline_rolls_the_transaction_back(
    database: db.Database,
) -> None:
    with pytest.raises(db.IntegrityError) as refused:
        async with database.pipelined_transaction() as conn:
            await conn.one("test_add_note", n=-1)
    assert refused.value.constraint == "test_notes_n_check"

    async with database.connection() as conn:  # the connection is back, idle, and usable
        assert conn.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert await conn.one("test_add_note", n=4) == {"tenfold": 40}


async def test_a_last_statement_sent_with_the_commit_is_one_round_trip(
    database: db.Database, tmp_path: Path
) -> None:
    rows, trips = await two_notes(database, tmp_path / "trace", "one_and_commit")

    assert rows == [{"tenfold": 10}, {"tenfold": 20}]
    assert len(trips) == 2, trips  # BEGIN and the first statement; the last and COMMIT
    last_and_commit = trips[1]
    assert any("COMMIT" in message for message in last_and_commit), last_and_commit
    assert names(last_and_commit).count("Sync") == 1, last_and_commit
    async with database.connection() as conn:
        assert conn.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        notes = await conn.all("test_count_notes")
    assert notes == [{"n": 1}, {"n": 2}]


async def test_a_last_statement_refused_rolls_the_whole_transaction_back(
    database: db.Database,
) -> None:
    """Many times over: the statement's error and the skipped COMMIT's result sometimes
    arrive in one read and sometimes apart (about 1 in 70 here), and either way the
    caller gets the statement's error, with the transaction rolled back."""
    for n in range(1, 301):
        async with database.pipelined_transaction() as conn:
            await conn.one("test_add_note", n=n)
            with pytest.raises(db.IntegrityError) as refused:
                await conn.one_and_commit("test_add_note", n=-n)
            assert refused.value.constraint == "test_notes_n_check"
            # rolled back here, by the verb, not later by the pool
            assert conn.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    async with database.connection() as conn:
        assert await conn.all("test_count_notes") == []
