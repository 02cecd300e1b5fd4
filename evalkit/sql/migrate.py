"""Schema migrations: Alembic revisions that execute the hand-written SQL in ``schema/``."""

from __future__ import annotations

import functools
from pathlib import Path

import psycopg
from alembic import command, op
from alembic.config import Config
from alembic.script import ScriptDirectory

from evalkit.errors import DatabaseError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SCHEMA_DIR = Path(__file__).parent / "schema"


def run_sql(sql: str) -> None:
    """Execute raw SQL inside a revision; ``%`` is escaped because SQLAlchemy passes params."""
    op.get_bind().exec_driver_sql(sql.replace("%", "%%"))


def run_sql_file(name: str) -> None:
    run_sql((SCHEMA_DIR / name).read_text())


def sqlalchemy_url(url: str) -> str:
    """A libpq URL as SQLAlchemy wants it for psycopg 3."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("postgres", "postgresql", "postgresql+psycopg"):
        raise DatabaseError(f"database.url must start with postgresql://, not {scheme}://")
    return "postgresql+psycopg://" + rest


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    """The revision files, read once per process (readiness probes ask for the head often)."""
    return ScriptDirectory.from_config(alembic_config("postgresql://"))


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    """The revision the database is at, or None for a database evalkit never migrated."""
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            exists = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return None
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            return row[0] if row else None
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot connect to the database: {exc}".strip()) from None


def upgrade(url: str) -> tuple[str | None, str]:
    """Apply every pending migration; returns (before, after) revisions."""
    before = current_revision(url)
    command.upgrade(alembic_config(url), "head")
    return before, head_revision()


def require_head(url: str) -> None:
    """Refuse to serve a database whose schema is not the one this code expects."""
    current, head = current_revision(url), head_revision()
    if current == head:
        return
    if current is None:
        raise DatabaseError(
            "the database has no evalkit schema yet; run `evalkit db upgrade` to create it"
        )
    known = {s.revision for s in _scripts().walk_revisions()}
    if current not in known:
        raise DatabaseError(
            f"the database is at revision {current}, which this evalkit does not know: it was "
            "migrated by a newer version; upgrade evalkit to that version"
        )
    raise DatabaseError(
        f"the database is at revision {current}, this evalkit needs {head}; "
        "run `evalkit db upgrade` before starting the server"
    )
