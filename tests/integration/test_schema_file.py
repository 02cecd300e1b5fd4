"""evalkit/sql/schema.sql is what the migrations build, regenerated and compared."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from evalkit.sql import dump_schema


def test_schema_file_matches_the_migrations(tmp_path: Path):
    fresh = tmp_path / "schema.sql"
    dump_schema.write_schema(fresh)
    committed = dump_schema.SCHEMA_FILE.read_text().splitlines()
    diff = difflib.unified_diff(
        committed, fresh.read_text().splitlines(), "schema.sql", "migrations", lineterm="", n=1
    )
    changes = "\n".join(list(diff)[:40])
    if changes:
        pytest.fail(
            "evalkit/sql/schema.sql differs from what the migrations build; regenerate it with "
            f"`{dump_schema.REGENERATE}`:\n{changes}",
            pytrace=False,
        )
