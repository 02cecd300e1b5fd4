"""The procrastinate job queue schema, as shipped by the installed procrastinate.

Revision ID: 0001
Revises:
"""

from procrastinate.schema import SchemaManager

from evalkit.sql.migrate import run_sql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql(SchemaManager.get_schema())


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
