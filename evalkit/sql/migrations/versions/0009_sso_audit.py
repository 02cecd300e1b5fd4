"""Login limits (failed password logins per user and per address) and the audit log.

Revision ID: 0009
Revises: 0008
"""

from evalkit.sql.migrate import run_sql_file

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0009_sso_audit.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
