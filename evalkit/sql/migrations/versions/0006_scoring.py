"""Scores, scoring rounds, LLM providers, the default judge, remote evaluators.

Revision ID: 0006
Revises: 0005
"""

from evalkit.sql.migrate import run_sql_file

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0006_scoring.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
