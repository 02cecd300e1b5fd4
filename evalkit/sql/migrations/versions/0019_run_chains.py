"""Run chains: consecutive steps of one run recorded by one statement, each step still guarded.

Revision ID: 0019
Revises: 0018
"""

from evalkit.sql.migrate import run_sql_file

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0019_run_chains.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
