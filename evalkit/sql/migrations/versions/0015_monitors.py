"""Monitors: online scoring of the settled sessions of a deployed agent.

Revision ID: 0015
Revises: 0014
"""

from evalkit.sql.migrate import run_sql_file

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0015_monitors.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
