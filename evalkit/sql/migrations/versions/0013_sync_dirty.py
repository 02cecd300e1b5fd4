"""A sync from a git tree with uncommitted changes is recorded as dirty.

Revision ID: 0013
Revises: 0012
"""

from evalkit.sql.migrate import run_sql_file

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0013_sync_dirty.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
