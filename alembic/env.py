"""Alembic environment for memory_sql: the URL comes from memory_sql, never from alembic.ini."""

from __future__ import annotations

import logging.config

from alembic import context

from memory_sql.database import create_engine
from memory_sql.schema import metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or None)
    try:
        with engine.connect() as connection:
            _configure(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("memory_sql migrations run online only: give a database URL")
run_migrations_online()
