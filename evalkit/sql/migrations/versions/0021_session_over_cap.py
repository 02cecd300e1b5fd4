"""A session taken over its cap under a concurrent batch is refused by the write-back itself.

Revision ID: 0021
Revises: 0020
"""

from evalkit.sql.migrate import run_sql_file

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0021_session_over_cap.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
