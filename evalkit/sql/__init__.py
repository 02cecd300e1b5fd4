"""Every SQL statement evalkit runs, loaded once from the ``*.sql`` files beside this module.

Each statement sits under a header ``-- name: table_verb :one|:many|:exec`` followed by a
one-line ``--`` description. Callers write ``queries["user_get_by_name"]``; the cardinality is
informational, the store layer picks the verb.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (?P<name>[a-z0-9_]+) :(?P<kind>one|many|exec)\s*$", re.MULTILINE)

SQL_DIR = Path(__file__).parent


def parse_queries(text: str) -> dict[str, LiteralString]:
    """Split one .sql file into named statements; a duplicate name is an error."""
    found: dict[str, LiteralString] = {}
    headers = list(_HEADER.finditer(text))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end() : end]
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";")
        name = header["name"]
        if name in found:
            raise ValueError(f"SQL statement {name!r} is defined twice")
        if not statement:
            raise ValueError(f"SQL statement {name!r} has no body")
        found[name] = cast(LiteralString, statement)
    return found


def load_queries(directory: Path = SQL_DIR) -> dict[str, LiteralString]:
    queries: dict[str, LiteralString] = {}
    for path in sorted(directory.glob("*.sql")):
        if path.name == "schema.sql":  # the generated schema, to read: no statements
            continue
        for name, statement in parse_queries(path.read_text()).items():
            if name in queries:
                raise ValueError(f"SQL statement {name!r} in {path.name} is defined twice")
            queries[name] = statement
    return queries


queries = load_queries()
