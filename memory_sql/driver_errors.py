"""The one translator of database errors: what a driver (psycopg, sqlite3) or SQLAlchemy raised,
said as memory_sql says it.

- :func:`database_errors`: any driver or SQLAlchemy error becomes a
  :class:`~memory_sql.errors.StorageError` naming what was being done, the database (password
  hidden) and, for the failures an operator meets, what to check.
- :func:`violated_constraint`: the name of the constraint an ``IntegrityError`` reports, read
  from the driver's diagnostics (psycopg's ``diag.constraint_name``); SQLite names a unique
  constraint by its columns only (``UNIQUE constraint failed: memory_facts.tenant_id, …``),
  which are mapped here, through the schema, to the constraint's name. Callers test names,
  never message text.
- :func:`is_refusal`: a constraint refused a write (``is_refusal(exc, "pk_memory_facts")``:
  that constraint, by the name :func:`violated_constraint` reads);
  :func:`is_unavailable`: the database cannot be used now (not reachable, the connection
  lost, the file locked or unopenable), as opposed to a statement it refused.
- :data:`DRIVER_ERRORS`, :func:`is_disconnect`, :func:`is_locked`, :func:`driver_errors`,
  :func:`as_disconnection`: the driver errors and the conditions code that talks to a driver
  directly (the spool journal, the wake-up listener and poller, the tenant guard) reacts to.

Nothing else in memory_sql names ``psycopg.Error``, ``sqlite3.Error`` or ``sqlalchemy.exc``.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import TYPE_CHECKING

import psycopg
import sqlalchemy as sa

from .errors import StorageError
from .redaction import redacted

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

DRIVER_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, psycopg.Error)
"""What the two drivers raise (code on a driver's own connection catches these)."""

DATABASE_ERRORS: tuple[type[Exception], ...] = (sa.exc.SQLAlchemyError, *DRIVER_ERRORS)
"""Any failure of the database, through SQLAlchemy or a driver."""

SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
"""How long a SQLite connection waits for another writer's lock before failing (the engine's
busy timeout, :func:`memory_sql.database.create_engine`)."""

DisconnectionError = sa.exc.DisconnectionError
"""Raised in a pool's checkout hook: the connection is discarded and another one taken."""


@contextmanager
def database_errors(engine: Engine, what: str) -> Iterator[None]:
    """The one place a driver or SQLAlchemy error becomes a :class:`StorageError` naming
    ``what`` was being done and the database (password hidden)."""
    try:
        yield
    except sa.exc.SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None)
        reason = str(orig).strip().splitlines()[0] if orig is not None else str(exc)
        raise StorageError(
            f"{what}: database {_shown(engine.url)} failed: {_explained(reason)}"
        ) from exc


@contextmanager
def driver_errors(what: str) -> Iterator[None]:
    """A driver's error, on a connection of its own (no engine), as a :class:`StorageError`
    saying ``what`` failed."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise StorageError(f"{what}: {exc}") from exc


def quietly() -> AbstractContextManager[None]:
    """A driver's error ignored (closing, or rolling back, a connection that may be broken)."""
    return suppress(*DRIVER_ERRORS)


@contextmanager
def as_disconnection(what: str) -> Iterator[None]:
    """A driver's error in a pool's checkout hook as :data:`DisconnectionError`: the pool
    discards the connection and checks out another."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise DisconnectionError(f"{what}: {exc}") from exc


def is_refusal(exc: BaseException, constraint: str | None = None) -> bool:
    """Whether ``exc`` is a constraint refusing a write: any constraint, or the one named
    ``constraint`` (primary key, unique constraint or index, check; named as the schema names
    it, read from the driver's diagnostics by :func:`violated_constraint`)."""
    if not is_integrity_error(exc):
        return False
    return constraint is None or violated_constraint(exc) == constraint


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or the error behind a :class:`StorageError`) says the database cannot
    be used now: not reachable, a connection lost or timed out, SQLite's file locked or not to
    be opened; false for a statement the database refused (a constraint, bad SQL)."""
    cause = exc.__cause__ if isinstance(exc, StorageError) and exc.__cause__ else exc
    if isinstance(cause, (sa.exc.DisconnectionError, sa.exc.TimeoutError)):
        return True
    if isinstance(cause, sa.exc.DBAPIError):
        if cause.connection_invalidated:
            return True
        cause = cause.orig if cause.orig is not None else cause
    if isinstance(cause, sqlite3.OperationalError):  # also "no such table", bad SQL: refused
        return _SQLITE_UNAVAILABLE.search(str(cause)) is not None
    return isinstance(cause, (psycopg.OperationalError, psycopg.InterfaceError))


_SQLITE_UNAVAILABLE = re.compile(
    r"locked|busy|unable to open|disk I/O|readonly database|database or disk is full", re.I
)


def is_integrity_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a constraint refusing a write."""
    return isinstance(exc, (sa.exc.IntegrityError, sqlite3.IntegrityError, psycopg.IntegrityError))


def violated_constraint(exc: BaseException) -> str | None:
    """The name of the constraint (primary key, unique constraint or index, check) whose
    violation ``exc`` reports (a SQLAlchemy ``IntegrityError`` or the driver's own); None for
    any other error, or a constraint the schema does not know."""
    if not is_integrity_error(exc):
        return None
    orig = getattr(exc, "orig", None) or exc
    diag = getattr(orig, "diag", None)
    if diag is not None:  # psycopg: the server names it
        name: str | None = diag.constraint_name
        return name
    if isinstance(orig, sqlite3.IntegrityError):
        return _sqlite_constraint(str(orig))
    return None


_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (.+)$")
_SQLITE_CHECK = re.compile(r"CHECK constraint failed: (\w+)$")
_SQLITE_INDEX = re.compile(r"index '([^']+)'")


def _sqlite_constraint(message: str) -> str | None:
    """SQLite's ``UNIQUE constraint failed: table.col, table.col`` (or ``index 'name'``) as
    the name of the schema's constraint over those columns."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    check = _SQLITE_CHECK.search(first)
    if check:
        return check.group(1)
    found = _SQLITE_UNIQUE.search(first)
    if found is None:
        return None
    what = found.group(1).strip()
    index = _SQLITE_INDEX.fullmatch(what)
    if index:
        return index.group(1)
    columns = [part.strip() for part in what.split(",")]
    tables = {column.partition(".")[0] for column in columns}
    if len(tables) != 1:
        return None
    return _unique_names().get((tables.pop(), frozenset(c.partition(".")[2] for c in columns)))


@functools.cache
def _unique_names() -> dict[tuple[str, frozenset[str]], str]:
    """(table, its columns) → the name of each primary key, unique constraint and unique
    index of the schema."""
    from .schema import metadata  # the schema's names are the database's (revisions match)

    names: dict[tuple[str, frozenset[str]], str] = {}
    for table in metadata.tables.values():
        keys = [
            table.primary_key,
            *(c for c in table.constraints if isinstance(c, sa.UniqueConstraint)),
        ]
        for constraint in keys:
            if constraint.name and len(constraint.columns):
                names[(table.name, frozenset(c.name for c in constraint.columns))] = str(
                    constraint.name
                )
        for index in table.indexes:
            if index.unique and index.name:
                columns = frozenset(c.name for c in index.columns)
                names.setdefault((table.name, columns), str(index.name))
    return names


def is_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (another connection holds the lock)."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` (or the driver error behind a :class:`StorageError`) is a pooled
    connection found dead, as after a database restart. SQLAlchemy then discards every
    connection the pool held, so the next checkout makes a fresh one."""
    cause = exc.__cause__ if isinstance(exc, StorageError) else exc
    return isinstance(cause, sa.exc.DBAPIError) and cause.connection_invalidated


# Driver messages an operator meets, said in terms of what to check.
@functools.cache
def _explanations() -> tuple[tuple[re.Pattern[str], str], ...]:
    return (
        (
            re.compile(r"attempt to write a readonly database", re.I),
            "the SQLite file is read-only (SQLite must write the file and create its -wal and "
            "-shm files beside it: check the permissions of the file and of its folder)",
        ),
        (
            re.compile(r"unable to open database file", re.I),
            "cannot open the SQLite file (its folder is missing, or not writable for the -wal "
            "and -shm files SQLite creates beside it)",
        ),
        (
            re.compile(r"database is locked", re.I),
            f"the SQLite file stayed locked by another writer for "
            f"{SQLITE_BUSY_TIMEOUT_SECONDS:g} s",
        ),
        (
            re.compile(r"Connection refused", re.I),
            "connection refused: no server is listening there (is PostgreSQL running?)",
        ),
        (
            re.compile(r"read-only transaction", re.I),
            "the database is read-only (a standby, or default_transaction_read_only is on): "
            "memory_sql needs a writable primary",
        ),
        (
            re.compile(r"terminating connection|server closed the connection", re.I),
            "the server closed the connection (restarting or shutting down)",
        ),
    )


def _explained(reason: str) -> str:
    for pattern, explanation in _explanations():
        if pattern.search(reason):
            return explanation
    return reason


def _shown(url: URL) -> str:
    """The database as a message names it: a SQLite file by its path, others by URL."""
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = url.database
        return path[len("file:") :] if url.query.get("uri") and path.startswith("file:") else path
    return redacted(url)
