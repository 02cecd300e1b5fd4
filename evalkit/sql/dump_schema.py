"""Write ``schema.sql``: the schema the migrations build, one table at a time, for reading.

``uv run python -m evalkit.sql.dump_schema`` migrates an empty database of a scratch
embedded PostgreSQL to head and dumps it with that PostgreSQL's own ``pg_dump``, so the
output depends on the migrations only (not on the server a developer's tests use).
``pg_dump``'s banners, ``SET`` lines and per-object comments are dropped, and its objects
are regrouped: each table with its sequences, constraints, indexes, triggers and foreign
keys. ``tests/integration/test_schema_file.py`` fails when the file and the migrations
differ.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from evalkit.embedded import EmbeddedPostgres, bundled_binary
from evalkit.sql import migrate

SCHEMA_FILE = Path(__file__).parent / "schema.sql"
REGENERATE = "uv run python -m evalkit.sql.dump_schema"

# Per-day partitions of spans are data (named by the day the migration ran), not schema;
# alembic_version is Alembic's bookkeeping (the header names the revision instead).
EXCLUDED_TABLES = ("public.spans_" + "[0-9]" * 8, "public.alembic_version")

# procrastinate's objects come from the installed procrastinate (migration 0001): kept, so a
# procrastinate release that changes them shows here, but in a section of their own.
PROCRASTINATE = re.compile(r"procrastinate_")

# The order of objects inside a table's block; kinds not listed come after, by name.
KIND_ORDER = (
    "TYPE",
    "FUNCTION",
    "TABLE",
    "SEQUENCE",
    "SEQUENCE OWNED BY",
    "DEFAULT",
    "CONSTRAINT",
    "INDEX",
    "TRIGGER",
    "FK CONSTRAINT",
)

_ENTRY_HEADER = re.compile(
    r"^--\n-- Name: (?P<name>.+?); Type: (?P<kind>.+?); Schema: .+?; Owner: .*\n--\n", re.M
)
_DUMP_FOOTER = re.compile(r"^--\n-- PostgreSQL database dump complete", re.M)
# pg_dump sets session options between objects ("SET default_tablespace = '';"): not schema.
_TRAILING_SETTINGS = re.compile(r"(?:\n+SET \w+ = .*;)+\s*\Z")
# "CREATE INDEX x ON [ONLY] public.t", "ALTER TABLE [ONLY] public.t", "OWNED BY public.t.c".
_TABLE_IN_SQL = re.compile(r"\b(?:ON(?: ONLY)?|ALTER TABLE(?: ONLY)?|OWNED BY) public\.(\w+)")
# The objects whose dump header reads "<table> <object>".
_NAMED_AFTER_TABLE = {"CONSTRAINT", "FK CONSTRAINT", "TRIGGER", "DEFAULT"}


@dataclass(frozen=True)
class Entry:
    """One object of the dump: its name and kind as pg_dump labels them, and its SQL."""

    name: str
    kind: str
    sql: str

    @property
    def sort_key(self) -> tuple[int, str, str]:
        rank = KIND_ORDER.index(self.kind) if self.kind in KIND_ORDER else len(KIND_ORDER)
        return rank, self.kind, self.name


def pg_dump_schema(url: str) -> str:
    command = [str(bundled_binary("pg_dump")), "--schema-only", "--no-owner", "--no-privileges"]
    command += [f"--exclude-table={pattern}" for pattern in EXCLUDED_TABLES]
    return subprocess.run([*command, url], check=True, capture_output=True, text=True).stdout


def parse_dump(dump: str) -> list[Entry]:
    """The objects of a plain-format dump, without the session settings and banners around them."""
    dump = dump[: match.start()] if (match := _DUMP_FOOTER.search(dump)) else dump
    headers = list(_ENTRY_HEADER.finditer(dump))
    entries = []
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(dump)
        sql = _TRAILING_SETTINGS.sub("", dump[header.end() : end].strip())
        entries.append(Entry(header["name"], header["kind"], sql))
    return entries


def owning_table(entry: Entry, sequence_owners: dict[str, str]) -> str | None:
    """The table an entry belongs to, or None for a standalone type or function."""
    if entry.kind == "TABLE":
        return entry.name
    if entry.kind in _NAMED_AFTER_TABLE:
        return entry.name.split(" ", 1)[0]
    if entry.kind == "SEQUENCE" and entry.name in sequence_owners:
        return sequence_owners[entry.name]
    match = _TABLE_IN_SQL.search(entry.sql)
    return match[1] if match else None


def sequence_owners(entries: list[Entry]) -> dict[str, str]:
    """Sequence name -> table, from the ``ALTER SEQUENCE ... OWNED BY`` entries."""
    owners = {}
    for entry in entries:
        if entry.kind == "SEQUENCE OWNED BY" and (match := _TABLE_IN_SQL.search(entry.sql)):
            owners[entry.name] = match[1]
    return owners


def render_section(title: str, entries: list[Entry]) -> str:
    owners = sequence_owners(entries)
    standalone: list[Entry] = []
    tables: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        table = owning_table(entry, owners)
        (tables[table] if table else standalone).append(entry)
    blocks = [f"-- {'=' * 20} {title} {'=' * 20}"]
    if standalone:
        blocks += [entry.sql for entry in sorted(standalone, key=lambda e: e.sort_key)]
    for table in sorted(tables):
        statements = [entry.sql for entry in sorted(tables[table], key=lambda e: e.sort_key)]
        blocks.append(f"-- {table}\n\n" + "\n\n".join(statements))
    return "\n\n\n".join(blocks)


def header(revision: str) -> str:
    return (
        f"-- evalkit's database schema at migration {revision}. GENERATED: do not edit.\n"
        "-- The migrations (evalkit/sql/migrations/, with the SQL in evalkit/sql/schema/) are\n"
        "-- the source of truth; this file shows what they build, each table with its\n"
        "-- constraints, indexes, triggers and foreign keys, to read (nothing runs it).\n"
        f"-- After changing a migration, regenerate it: {REGENERATE}\n"
        "-- Left out: the per-day partitions of spans (spans_YYYYMMDD), alembic_version.\n"
        "-- procrastinate's own objects (migration 0001) come last, in a section of their own."
    )


def render_schema(dump: str, revision: str) -> str:
    entries = parse_dump(dump)
    ours = [e for e in entries if not PROCRASTINATE.search(e.name)]
    theirs = [e for e in entries if PROCRASTINATE.search(e.name)]
    sections = [
        header(revision),
        render_section("evalkit", ours),
        render_section("procrastinate (the job queue's own schema)", theirs),
    ]
    return "\n\n\n".join(sections) + "\n"


def generate_schema() -> str:
    """Migrate a fresh database of a scratch cluster to head and render its schema."""
    with (
        tempfile.TemporaryDirectory(prefix="evalkit-schema-") as scratch,
        EmbeddedPostgres(Path(scratch), cleanup="delete") as url,
    ):
        _, revision = migrate.upgrade(url)
        return render_schema(pg_dump_schema(url), revision)


def write_schema(path: Path = SCHEMA_FILE) -> None:
    path.write_text(generate_schema())


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else SCHEMA_FILE
    write_schema(path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
