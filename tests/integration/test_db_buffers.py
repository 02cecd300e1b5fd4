"""Large JSON through the connection layer (``evalkit.db``): sent as the bytes given, handed
to the caller's decoder as received, and the connection that carried it replaced when it
is given back, since libpq keeps its buffers as large as the largest message for as long as
the connection lives (measured in benchmarks/README.md, trajectory_memory.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from evalkit import db
from evalkit.sql import queries

BIG = db.LARGE_MESSAGE_BYTES + 1000


@pytest.fixture
async def database(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[db.Database]:
    monkeypatch.setitem(
        queries,  # type: ignore[arg-type]
        "test_jsonb_echo",
        "SELECT pg_backend_pid() AS pid, %(doc)s::jsonb AS doc, %(doc)s::jsonb::json AS text",
    )
    monkeypatch.setitem(queries, "test_backend", "SELECT pg_backend_pid() AS pid")  # type: ignore[arg-type]
    monkeypatch.setitem(
        queries,  # type: ignore[arg-type]
        "test_json_made",
        "SELECT json_build_object('text', repeat('x', %(n)s)) AS text",
    )
    database = db.Database(database_url, min_size=1, max_size=1)
    await database.open()
    yield database
    await database.close()


async def backend(database: db.Database) -> int:
    async with database.connection() as conn:
        row = await conn.one("test_backend")
    assert row is not None
    return int(row["pid"])


def document(size: int) -> bytes:
    return msgspec.json.encode({"text": "\u2014" + "x" * size})


async def test_bytes_are_sent_as_json_and_decoded_by_the_caller(database: db.Database) -> None:
    data = document(100)
    seen: list[bytes] = []

    def decode(text: db.Buffer) -> object:
        seen.append(bytes(text))
        return msgspec.json.decode(text)

    async with database.connection() as conn:
        row = await conn.one_decoding_json("test_jsonb_echo", decode, doc=db.JsonBytes(data))
    assert row is not None
    assert row["doc"] == row["text"] == msgspec.json.decode(data)  # jsonb column: a dict
    assert seen == [b'{"text": "' + "\u2014".encode() + b"x" * 100 + b'"}']


async def test_a_connection_that_carried_a_large_value_is_replaced(database: db.Database) -> None:
    first = await backend(database)
    async with database.connection() as conn:
        await conn.one("test_jsonb_echo", doc=db.JsonBytes(document(100)))
    assert await backend(database) == first  # small: kept

    async with database.connection() as conn:
        await conn.one("test_jsonb_echo", doc=db.JsonBytes(document(BIG)))
    second = await backend(database)
    assert second != first  # sent a large parameter: replaced

    async with database.connection() as conn:
        await conn.one("test_jsonb_echo", doc=document(BIG).decode())
    third = await backend(database)
    assert third != second  # a large str too

    async with database.transaction() as conn:
        row = await conn.one_decoding_json(
            "test_jsonb_echo", msgspec.json.decode, doc=db.JsonBytes(document(100))
        )
    assert row is not None and await backend(database) == third

    async with database.connection() as conn:
        row = await conn.one_decoding_json("test_json_made", msgspec.json.decode, n=BIG)
    assert row is not None and len(row["text"]["text"]) == BIG
    assert await backend(database) != third  # received a large json: replaced
