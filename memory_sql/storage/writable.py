"""Whether a database takes writes, asked before a process starts work that must write."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from ..database import database_errors
from .dialects import dialect_of


def check_writable(engine: Engine) -> None:
    """Raise a :class:`~memory_sql.errors.StorageError` saying what is wrong unless the
    database takes writes. The probe (:attr:`~.dialects.SQLDialect.writable_probe`) writes
    nothing and rolls back."""
    dialect = dialect_of(engine)
    with database_errors(engine, "memory_sql needs to write"), engine.connect() as conn:
        conn = conn.execution_options(**dialect.write_options)
        with conn.begin() as transaction:
            conn.exec_driver_sql(dialect.writable_probe)
            transaction.rollback()
