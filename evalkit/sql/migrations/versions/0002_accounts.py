"""Users, login tokens, workspaces, memberships, promotions.

Revision ID: 0002
Revises: 0001
"""

from evalkit.sql.migrate import run_sql_file

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0002_accounts.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
