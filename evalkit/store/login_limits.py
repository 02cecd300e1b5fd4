"""Password login limits: failures are counted per user and per client address, and past a
free allowance each further failure doubles the wait before the next attempt is heard.

A refused attempt (429) is not checked and not counted, so waiting it out is the only way
on. A user's successful login clears that user's count; an address's count ends when the
address has been quiet for ``FORGET_SECONDS``.
"""

from __future__ import annotations

import math

from evalkit.db import Conn
from evalkit.errors import TooManyRequests, Unauthorized
from evalkit.model import api
from evalkit.store import accounts

USER_FREE_FAILURES = 5
"""Failures of one username before the waits start."""
ADDRESS_FREE_FAILURES = 20
"""Failures from one client address (any usernames) before the waits start."""
FIRST_WAIT_SECONDS = 1
"""The wait after the first failure past the allowance; it doubles with each further one."""
MAX_WAIT_SECONDS = 15 * 60
FORGET_SECONDS = 60 * 60
"""A key with no failure for this long starts from zero again."""


def user_key(username: str) -> str:
    return f"user:{username.lower()}"


def address_key(address: str) -> str:
    return f"addr:{address}"


def wait_after(failures: int, free: int) -> int:
    """Seconds the next attempt waits after ``failures`` failures in a row (0: none)."""
    if failures < free:
        return 0
    return int(min(MAX_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2 ** (failures - free)))


async def check(conn: Conn, username: str, address: str | None) -> None:
    """Refuse with 429 while the user or the address is waiting out a backoff."""
    keys = [user_key(username)] + ([address_key(address)] if address else [])
    blocked = await conn.all("login_failure_blocked", keys=keys)
    if not blocked:
        return
    worst = max(blocked, key=lambda row: row["retry_after"])
    seconds = max(1, int(worst["retry_after"]))
    who = f"user {username!r}" if worst["key"].startswith("user:") else f"address {address}"
    raise TooManyRequests(
        f"too many failed logins for {who}; try again in {_spoken(seconds)} "
        "(each further failure doubles the wait; an admin can reset the password with "
        "`evalkit users reset`)",
        retry_after=seconds,
    )


async def record_failure(conn: Conn, username: str, address: str | None) -> None:
    # An empty username names no user (the key "user:" is refused by the table's check);
    # the attempt still counts against the address.
    keys = [(user_key(username), USER_FREE_FAILURES)] if username else []
    if address:
        keys.append((address_key(address), ADDRESS_FREE_FAILURES))
    for key, free in keys:
        row = await conn.one("login_failure_record", key=key, forget_seconds=FORGET_SECONDS)
        assert row is not None
        wait = wait_after(row["failures"], free)
        if wait:
            await conn.execute("login_failure_block", key=key, seconds=wait)
    await conn.execute("login_failure_delete_stale", forget_seconds=FORGET_SECONDS)


async def login(
    conn: Conn, username: str, password: str, ttl_hours: int, address: str | None
) -> api.Session:
    """A password login under the limits: refused while waiting, counted when wrong,
    and the user's count cleared when right."""
    await check(conn, username, address)
    try:
        session = await accounts.login(conn, username, password, ttl_hours)
    except Unauthorized as exc:
        if exc.code == "bad-credentials":
            await record_failure(conn, username, address)
        raise
    await conn.execute("login_failure_clear", key=user_key(username))
    return session


def _spoken(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    return f"{math.ceil(seconds / 60)} minutes"
