"""Claims in one statement: the agent row is locked inside the database, not across round trips.

Revision ID: 0018
Revises: 0017
"""

from evalkit.sql.migrate import run_sql_file

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0018_claim_in_one_statement.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
