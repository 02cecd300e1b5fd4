"""Schedules: experiments the server starts on a cron timer.

Revision ID: 0007
Revises: 0006
"""

from evalkit.sql.migrate import run_sql_file

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0007_schedules.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
