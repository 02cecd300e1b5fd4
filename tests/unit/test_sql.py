"""The named-statement loader and the statements evalkit ships."""

from __future__ import annotations

import re

import pytest

from evalkit.sql import SQL_DIR, load_queries, parse_queries, queries


def test_parse_named_statements():
    text = (
        "-- name: user_get :one\n-- One user.\nSELECT 1;\n\n"
        "-- name: user_list :many\n-- All users.\nSELECT 2\n"
    )
    assert parse_queries(text) == {"user_get": "SELECT 1", "user_list": "SELECT 2"}


def test_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a :one\nSELECT 1;\n-- name: a :one\nSELECT 2;\n")


def test_empty_statement_is_refused():
    with pytest.raises(ValueError, match="has no body"):
        parse_queries("-- name: a :one\n-- nothing here\n")


def test_shipped_statements_load_and_follow_naming():
    assert queries == load_queries(SQL_DIR)
    for name in ("user_insert", "login_token_resolve", "workspace_get_facts", "membership_upsert"):
        assert name in queries
    for name in queries:
        assert re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", name), f"{name}: use table_verb names"


def test_every_statement_has_a_description():
    for path in SQL_DIR.glob("*.sql"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("-- name: "):
                assert lines[i + 1].startswith("-- "), f"{path.name}: {line} has no description"


def test_every_statement_is_used():
    """A statement no code names is dead SQL: delete it, or use it."""
    from pathlib import Path

    code = "\n".join(p.read_text() for p in Path(SQL_DIR).parent.rglob("*.py"))
    unused = [name for name in queries if f'"{name}"' not in code]
    assert not unused, f"SQL statements no code runs: {unused}"
