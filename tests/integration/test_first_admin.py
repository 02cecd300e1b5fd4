"""The first start creates `admin` once, even when two edge processes (replicas started by
compose at the same moment) both find no admin and race to create it."""

from __future__ import annotations

import asyncio

from evalkit.db import Database
from evalkit.serve import ADMIN_PASSWORD_ENV, ensure_admin
from evalkit.store import accounts


async def test_two_edges_starting_together_create_one_admin(database_url):
    env = {ADMIN_PASSWORD_ENV: "first-start-pw"}
    first, second = Database(database_url), Database(database_url)
    await first.open()
    await second.open()
    try:
        said = await asyncio.gather(*(ensure_admin(db, env) for db in (first, second) * 3))
        async with first.connection() as conn:
            users = await accounts.list_users(conn)
    finally:
        await first.close()
        await second.close()
    assert [u.username for u in users] == ["admin"]
    # Exactly one start reports the creation; the others found it or lost the race quietly.
    assert said.count("created admin user 'admin' from EVALKIT_ADMIN_PASSWORD") == 1
    assert said.count(None) == 5
