"""Engines for the two supported databases, configured for many processes sharing one store."""

from __future__ import annotations

import functools
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from . import tenancy
from .errors import StorageError

logger = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
DEFAULT_DATABASE_URL = "sqlite:///memory_sql.db"
URL_ENV = "MEMORY_SQL_DATABASE_URL"
SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
STATEMENT_TIMEOUT_SECONDS = 30.0
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


def create_engine(
    url: str | URL | None = None,
    *,
    statement_timeout: float | None = STATEMENT_TIMEOUT_SECONDS,
    tenant_default: str = tenancy.ALL_TENANTS,
    **kwargs: Any,
) -> Engine:
    """A SQLAlchemy engine for ``url`` (see :func:`resolve_url`).

    SQLite gets WAL journaling, a busy timeout, foreign keys, and real transactions: SQLAlchemy
    emits ``BEGIN`` itself (pysqlite would defer it to the first write, so two reads in one
    transaction could see different data), and a connection with the execution option
    ``sqlite_begin="IMMEDIATE"`` takes the write lock at ``BEGIN``, so a read-then-write
    transaction waits for other writers instead of failing. PostgreSQL connections are not
    pinged before use (that would double the cost of a cached load): a connection found dead
    invalidates the pool, and the callers wrapped in :func:`reconnecting` run once more.

    Nothing waits forever on a database that stopped answering: connecting and taking a pooled
    connection give up after :data:`CONNECT_TIMEOUT_SECONDS`, and on PostgreSQL a statement
    after ``statement_timeout`` seconds (a lock wait after a third of it); ``None`` lifts the
    statement limit, as schema migrations of large tables need.

    PostgreSQL connections carry the tenant that row-level security lets them see
    (:mod:`memory_sql.tenancy`): the one acted for, else ``tenant_default`` (every tenant, for
    the library and the CLI; :data:`~memory_sql.tenancy.NO_TENANT` for the HTTP service).
    """
    parsed = resolve_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_SECONDS)
        engine = sa.create_engine(parsed, **kwargs)
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_recycle", 1800)
    kwargs.setdefault("pool_timeout", CONNECT_TIMEOUT_SECONDS)
    connect_args = kwargs.setdefault("connect_args", {})
    connect_args.setdefault("connect_timeout", int(CONNECT_TIMEOUT_SECONDS))
    # Timestamps arrive in UTC, as they are kept: no conversion per value on the way in.
    options = "-c TimeZone=UTC"
    if statement_timeout is not None:
        options += (
            f" -c statement_timeout={int(statement_timeout * 1000)}"
            f" -c lock_timeout={int(statement_timeout * 1000 / 3)}"
        )
    connect_args["options"] = f"{connect_args.get('options', '')} {options}".strip()
    engine = sa.create_engine(parsed, **kwargs)
    tenancy.guard_engine(engine, default=tenant_default)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            _journal_mode_wal(cursor)
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


def _journal_mode_wal(cursor: Any) -> None:
    """Switch a SQLite file to WAL journaling (it stays so). Connections racing on a file
    still in rollback mode (processes opening a new database at once) can get "database is
    locked" here at once, SQLite's busy handler not being called for it: tried again."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_SECONDS
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


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


# Driver messages an operator meets, said in terms of what to check.
_EXPLAINED = (
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
        f"the SQLite file stayed locked by another writer for {SQLITE_BUSY_TIMEOUT_SECONDS:g} s",
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
    for pattern, explanation in _EXPLAINED:
        if pattern.search(reason):
            return explanation
    return reason


def _shown(url: URL) -> str:
    """The database as a message names it: a SQLite file by its path, others by URL."""
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = url.database
        return path[len("file:") :] if url.query.get("uri") and path.startswith("file:") else path
    return redacted(url)


def check_writable(engine: Engine) -> None:
    """Raise a :class:`StorageError` saying what is wrong unless the database takes writes.

    The probe writes nothing and rolls back: on SQLite it rewrites the migration stamp to
    itself; on PostgreSQL, whose read-only transactions refuse any UPDATE before looking for
    rows, it updates no row of the queue (a role the service runs as may update the queue,
    not the stamp)."""
    sqlite = engine.dialect.name == "sqlite"
    with database_errors(engine, "memory_sql needs to write"), engine.connect() as conn:
        conn = conn.execution_options(**({"sqlite_begin": "IMMEDIATE"} if sqlite else {}))
        with conn.begin() as transaction:
            conn.exec_driver_sql(
                "UPDATE alembic_version SET version_num = version_num"
                if sqlite
                else "UPDATE memory_pending_updates SET attempts = attempts WHERE false"
            )
            transaction.rollback()


def is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` (or the driver error behind a :class:`StorageError`) is a pooled
    connection found dead, as after a database restart. SQLAlchemy then discards every
    connection the pool held, so the next checkout makes a fresh one."""
    cause = exc.__cause__ if isinstance(exc, StorageError) else exc
    return isinstance(cause, sa.exc.DBAPIError) and cause.connection_invalidated


def reconnecting(call: Callable[P, T]) -> Callable[P, T]:
    """``call``, run once more when it fails on a connection found dead (:func:`is_disconnect`).

    Only for work that is safe to repeat: reads, and writes whose second run changes nothing
    the first one did (an upsert of the latest value, a delete, a conditional update). A
    database that is really down fails the second run too, and its error is raised.
    """

    @functools.wraps(call)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return call(*args, **kwargs)
        except (StorageError, sa.exc.DBAPIError) as exc:
            if not is_disconnect(exc):
                raise
            logger.info("database connection found dead (%s); trying again", type(exc).__name__)
        return call(*args, **kwargs)

    return wrapper


class OutageLog:
    """Logs a database outage once for a long-running loop, and its end.

    ``failed(exc)`` logs a warning the first time after a success (later failures at DEBUG);
    ``succeeded()`` logs how long the outage lasted once the database answers again.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            first = self._since is None
            if first:
                self._since = time.monotonic()
        if first:
            logger.warning("%s: database unavailable, trying until it answers: %s", self.what, exc)
        else:
            logger.debug("%s: database still unavailable: %s", self.what, exc)

    def succeeded(self) -> None:
        if self._since is None:
            return
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            logger.warning(
                "%s: database answers again after %.1f s", self.what, time.monotonic() - since
            )


def redacted(url: URL | str | os.PathLike[str]) -> str:
    """A database URL, an http(s) URL or a path as text safe for messages and logs.

    Secrets are replaced by ``***``: the password of the ``user:password@`` part, and the value
    of every query parameter whose name holds ``pass``, ``pwd``, ``secret``, ``token``, ``key``,
    ``sig``, ``credential`` or ``auth`` (``password``, ``sslpassword``, ``api_key``,
    ``access_token``, …). The user name, host, port, path and other parameters stay. A
    database URL (a :class:`~sqlalchemy.engine.URL`, or text with a ``scheme://`` other than
    http or https that SQLAlchemy can parse) is read as SQLAlchemy reads it, and rendered by it;
    any other text with ``://`` is masked as it is written. Text without ``://`` (a folder or
    a file) is returned unchanged. Never raises.
    """
    if isinstance(url, URL):
        return _render_database_url(url)
    text = os.fspath(url)
    if "://" not in text:
        return text
    if text.split("://", 1)[0].lower() not in ("http", "https"):
        try:
            return _render_database_url(make_url(text))
        except Exception:  # not a URL SQLAlchemy reads: mask it as text
            pass
    return _mask_url_text(text)


_MASK = "***"


def _secret_parameter(name: str) -> bool:
    return re.search(r"pass|pwd|secret|token|key|sig|credential|auth", name, re.I) is not None


def _render_database_url(url: URL) -> str:
    from urllib.parse import quote_plus

    if url.host and "@" in url.host:
        # A raw "@" in the password: SQLAlchemy took the password's end for part of the host.
        url = url.set(host=_MASK + url.host[url.host.rindex("@") :])
    text = url.set(query={}).render_as_string(hide_password=True)
    query = []
    for name, values in url.query.items():
        for value in (values,) if isinstance(values, str) else values:
            shown = _MASK if _secret_parameter(name) else quote_plus(value)
            query.append(f"{quote_plus(name)}={shown}")
    return text + "?" + "&".join(query) if query else text


def _mask_url_text(text: str) -> str:
    from urllib.parse import unquote_plus

    # scheme://user:password@host… as SQLAlchemy splits it: the password runs to the first "@"
    # and, should the host then hold another "@", to its last one.
    match = re.match(r"([^:/?#@]*://[^:/]*):([^@]*)@([^/?#]*)", text)
    if match:
        host = match.group(3)
        if "@" in host:
            host = _MASK + host[host.rindex("@") :]
        text = f"{match.group(1)}:{_MASK}@{host}{text[match.end() :]}"
    start = text.find("?", text.find("://") + 3)
    if start < 0:
        return text
    end = text.find("#", start)
    end = len(text) if end < 0 else end
    pairs = []
    for pair in text[start + 1 : end].split("&"):
        name, equals, _ = pair.partition("=")
        pairs.append(
            f"{name}={_MASK}" if equals and _secret_parameter(unquote_plus(name)) else pair
        )
    return text[: start + 1] + "&".join(pairs) + text[end:]
