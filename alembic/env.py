"""Alembic environment for memory_sql: the URL comes from memory_sql, never from alembic.ini."""

from __future__ import annotations

import logging.config

from alembic import context

from memory_sql.database import create_engine
from memory_sql.schema import metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)


# The full-text index lives outside the models (a generated tsvector column and its GIN index on
# PostgreSQL, an FTS5 table and its shadow tables on SQLite: revision 0011), so the comparison
# of the tables with the models leaves it out.
_INDEX_OBJECTS = ("search_vector", "ix_memory_facts_search")


def _compared(obj, name, type_, reflected, compare_to) -> bool:
    if name in _INDEX_OBJECTS:
        return False
    return not (type_ == "table" and name is not None and name.startswith("memory_facts_fts"))


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=_compared,
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
