"""Agents, span mappings, experiments, runs, trajectories.

Revision ID: 0004
Revises: 0003
"""

from evalkit.sql.migrate import run_sql_file

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0004_agents_runs.sql")


def downgrade() -> None:
    raise NotImplementedError("evalkit migrations go forward only; restore a backup to go back")
