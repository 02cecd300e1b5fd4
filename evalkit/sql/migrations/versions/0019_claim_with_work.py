"""A claim that returns the claimed runs' work: one round trip where there were two.

Revision ID: 0019
Revises: 0018
"""

from evalkit.sql.migrate import run_sql_file

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0019_claim_with_work.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
