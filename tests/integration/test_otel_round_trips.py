"""How often a batch's transaction waits for the database, counted from libpq's trace (see
test_db_round_trips): the collector's hot path, where each round trip wakes a backend."""

from __future__ import annotations

from pathlib import Path

from evalkit.config import OtelSettings
from evalkit.db import Database
from evalkit.edge.routes.otel import store_batch
from evalkit.store import otel as store
from tests.integration.test_db_round_trips import names, round_trips, traced
from tests.integration.test_otel_agent_hold import NAMES, NOW, agent, spans, workspace


async def test_a_batch_of_new_sessions_is_four_round_trips(
    database_url: str, tmp_path: Path
) -> None:
    """BEGIN and the claim; the COPY's start, then its data; the write-back and the COMMIT."""
    agent_id = agent(database_url, workspace(database_url), "bot")
    database = Database(database_url, min_size=1, max_size=1)
    await database.open()
    trace = tmp_path / "trace"
    try:
        async with database.connection() as conn:
            await store.ensure_partition(conn, NOW.date())
            pgconn = conn.raw.pgconn  # the pool's only connection: the batch gets it
        with trace.open("w") as file:
            traced(pgconn, file)
            result = await store_batch(
                database,
                agent_id,
                spans(1, with_root=True) + spans(2, with_root=True),
                session_names=NAMES,
                settings=OtelSettings(),
                received_at=NOW,
                exact=False,
                token_id=None,
            )
            pgconn.untrace()
    finally:
        await database.close()

    assert (result.stored, result.touched) == (6, ["session-1", "session-2"])
    messages = round_trips(trace)
    trips = [names(trip) for trip in messages]
    assert len(trips) == 4, trips
    claim, copy_start, copy_data, _ = trips
    assert claim.count("Sync") == 1 and copy_start == ["Query"], trips
    assert copy_data[-1] == "CopyDone", copy_data
    assert any("COMMIT" in message for message in messages[3]), messages[3]
