"""Agent hold: one lock of the agent a batch instead of a foreign key check a row.

Revision ID: 0020
Revises: 0019
"""

from evalkit.sql.migrate import run_sql_file

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0020_agent_hold.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
