"""Spans deduplicated within their trace: span_keys dropped.

Revision ID: 0016
Revises: 0015
"""

from evalkit.sql.migrate import run_sql_file

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0016_span_dedupe.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
