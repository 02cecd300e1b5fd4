"""Judge alignment: proposals tried in trial rounds, and the examples a workspace accepted.

Revision ID: 0017
Revises: 0015
"""

from evalkit.sql.migrate import run_sql_file

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0017_judge_alignment.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
