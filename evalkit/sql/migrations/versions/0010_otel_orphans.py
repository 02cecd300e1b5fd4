"""Traces whose root span never arrives: the orphan mark and the index of unassigned traces.

Revision ID: 0010
Revises: 0009
"""

from evalkit.sql.migrate import run_sql_file

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0010_otel_orphans.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
