"""The current version of each case kept on the case (cases.current_version), backfilled.

Revision ID: 0011
Revises: 0010
"""

from evalkit.sql.migrate import run_sql_file

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0011_case_current_version.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
