"""Engines for the two supported databases, configured for many processes sharing one store."""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

DEFAULT_DATABASE_URL = "sqlite:///memory_sql.db"
URL_ENV = "MEMORY_SQL_DATABASE_URL"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
_SUPPORTED_DRIVERS = ("sqlite", "sqlite+pysqlite", "postgresql+psycopg")


def resolve_url(url: str | URL | None = None) -> URL:
    """``url``, else ``$MEMORY_SQL_DATABASE_URL``, else a SQLite file in the working directory.

    ``postgresql://`` and ``postgres://`` mean psycopg 3 (``postgresql+psycopg://``).
    """
    raw = url if url is not None else os.environ.get(URL_ENV) or DEFAULT_DATABASE_URL
    try:
        parsed = make_url(raw) if isinstance(raw, str) else raw
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"not a database URL: {exc}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in _SUPPORTED_DRIVERS:
        raise ValueError(
            f"unsupported database {parsed.drivername!r}: use sqlite:///… or postgresql+psycopg://…"
        )
    return parsed


def create_engine(url: str | URL | None = None, **kwargs: Any) -> Engine:
    """A SQLAlchemy engine for ``url`` (see :func:`resolve_url`).

    SQLite gets WAL journaling, a busy timeout, foreign keys, and real transactions: SQLAlchemy
    emits ``BEGIN`` itself (pysqlite would defer it to the first write, so two reads in one
    transaction could see different data), and a connection with the execution option
    ``sqlite_begin="IMMEDIATE"`` takes the write lock at ``BEGIN``, so a read-then-write
    transaction waits for other writers instead of failing. PostgreSQL connections are
    pre-pinged, so a restarted server costs one failed checkout, not an error.
    """
    parsed = resolve_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_SECONDS)
        engine = sa.create_engine(parsed, **kwargs)
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(parsed, **kwargs)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        options = connection.get_execution_options()
        if options.get("isolation_level") == "AUTOCOMMIT":
            return
        connection.exec_driver_sql(f"BEGIN {options.get('sqlite_begin', '')}".strip())


def redacted(url: URL | str) -> str:
    """The URL as text with any password hidden, for messages and logs."""
    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.render_as_string(hide_password=True)
