"""Run transitions guarded by a trigger and logged in run_events.

Revision ID: 0012
Revises: 0011
"""

from evalkit.sql.migrate import run_sql_file

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0012_run_events.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
