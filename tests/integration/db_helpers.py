"""Statements run straight on a test's database, outside evalkit's own connections."""

from __future__ import annotations

import psycopg


def sql(database_url: str, text: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run one statement in autocommit; its rows (none for a statement without any)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(text, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []
