"""Alembic environment: migrations run against the URL evalkit passes in the config."""

from alembic import context
from sqlalchemy import create_engine, pool

# Two processes starting at once (a server and a worker) must not migrate concurrently.
MIGRATION_LOCK_ID = 0x6576616C  # "eval"

config = context.config
engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
with engine.connect() as connection:
    connection.exec_driver_sql(f"SELECT pg_advisory_lock({MIGRATION_LOCK_ID})")
    connection.commit()
    context.configure(connection=connection, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
