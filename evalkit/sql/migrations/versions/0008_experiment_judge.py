"""Experiments record which judge grades their rubrics (the server's or the SDK's).

Revision ID: 0008
Revises: 0007
"""

from evalkit.sql.migrate import run_sql_file

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0008_experiment_judge.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
