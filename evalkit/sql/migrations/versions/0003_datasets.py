"""Datasets, cases, case versions, the case changelog, fixtures.

Revision ID: 0003
Revises: 0002
"""

from evalkit.sql.migrate import run_sql_file

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0003_datasets.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
