"""OpenTelemetry: agent tokens, spans partitioned by day, span keys, sessions.

Revision ID: 0005
Revises: 0004
"""

from evalkit.sql.migrate import run_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0005_otel.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
