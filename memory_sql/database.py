"""Engines for the two supported databases, configured for many processes sharing one store."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from . import pooling, tenancy
from .driver_errors import DATABASE_ERRORS
from .driver_errors import SQLITE_BUSY_TIMEOUT_SECONDS as SQLITE_BUSY_TIMEOUT_SECONDS
from .driver_errors import database_errors as database_errors
from .driver_errors import is_disconnect as is_disconnect
from .errors import StorageError
from .redaction import redacted as redacted

logger = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
_RECONNECTABLE: tuple[type[Exception], ...] = (StorageError, *DATABASE_ERRORS)
DEFAULT_DATABASE_URL = "sqlite:///memory_sql.db"
URL_ENV = "MEMORY_SQL_DATABASE_URL"
CONNECT_TIMEOUT_SECONDS = 10.0
STATEMENT_TIMEOUT_SECONDS = 30.0
PREPARE_THRESHOLD = 5
"""psycopg's ``prepare_threshold``: a statement run this many times on a connection is
prepared on the server (parsed and planned once), the driver's own default; None never
prepares (``database.prepare_threshold``)."""


def resolve_url(url: str | URL | None = None) -> URL:
    """``url``, else ``$MEMORY_SQL_DATABASE_URL``, else a SQLite file in the working directory.

    ``postgresql://`` and ``postgres://`` mean psycopg 3 (``postgresql+psycopg://``). A
    libpq multi-host URL (``…@h1:5432,h2:5432/db?target_session_attrs=read-write``) connects
    to whichever of its hosts is the primary (docs/replication.md).
    """
    raw = url if url is not None else os.environ.get(URL_ENV) or DEFAULT_DATABASE_URL
    if isinstance(raw, str):
        raw = _hosts_as_query(raw)
    try:
        parsed = make_url(raw) if isinstance(raw, str) else raw
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"not a database URL: {exc}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    from .storage.dialects import supported_drivers  # storage/ imports this module

    if parsed.drivername not in supported_drivers():
        raise ValueError(
            f"unsupported database {parsed.drivername!r}: use sqlite:///… or postgresql+psycopg://…"
        )
    return parsed


_MULTI_HOST = re.compile(
    r"(?P<head>[A-Za-z0-9+]+://(?:[^@/?#]*@)?)(?P<hosts>[^@/?#]*,[^@/?#]*)(?P<tail>[/?#].*|)\Z"
)


def _hosts_as_query(url: str) -> str:
    """A libpq multi-host URL (``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=…``)
    written as SQLAlchemy reads one: each host as a ``host=h:p`` query parameter; libpq then
    tries them in order (docs/replication.md). Any other URL is returned as it is."""
    match = _MULTI_HOST.fullmatch(url)
    if match is None:
        return url
    path, _, query = match.group("tail").partition("?")
    hosts = "&".join(f"host={host.strip()}" for host in match.group("hosts").split(",") if host)
    return f"{match.group('head')}{path or '/'}?{hosts}{'&' + query if query else ''}"


def create_engine(
    url: str | URL | None = None,
    *,
    statement_timeout: float | None = STATEMENT_TIMEOUT_SECONDS,
    tenant_default: str = tenancy.ALL_TENANTS,
    prepare_threshold: int | None = PREPARE_THRESHOLD,
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
    A statement run ``prepare_threshold`` times on a connection is prepared on the server
    (None: never; the ``database.prepare_threshold`` setting).

    Each database's arguments and connection setup are its dialect's
    (:meth:`~memory_sql.storage.dialects.SQLDialect.engine_arguments`,
    :meth:`~memory_sql.storage.dialects.SQLDialect.prepare_engine`).

    A PostgreSQL URL ending in ``?pool_mode=transaction`` reaches the database through a pooler
    in transaction mode (PgBouncer): the tenant, the timeouts and the time zone are then set
    per statement, and nothing is prepared (:mod:`memory_sql.pooling`).
    """
    # The dialect module is in storage/, whose package imports this one: read when called.
    from .storage.dialects import dialect_of

    parsed, pooled = pooling.split(resolve_url(url))
    dialect = dialect_of(parsed)
    if pooled and not dialect.server:
        raise ValueError(f"{pooling.MARKER} is for PostgreSQL URLs only")
    kwargs = dialect.engine_arguments(
        kwargs,
        statement_timeout=statement_timeout,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        prepare_threshold=prepare_threshold,
    )
    if pooled:  # behind PgBouncer in transaction mode: no session state (memory_sql.pooling)
        pooling.prepare(kwargs)
    engine = sa.create_engine(parsed, **kwargs)
    if pooled:
        pooling.install(engine, statement_timeout=statement_timeout)
    dialect.prepare_engine(engine, tenant_default=tenant_default)
    if len(parsed.query.get("host", ())) > 1 and not isinstance(parsed.query["host"], str):
        _note_servers(engine)
    return engine


def _note_servers(engine: Engine) -> None:
    """Log which of a multi-host URL's servers the engine's connections reach, when it
    changes (a failover): :func:`note_server`."""
    label = str(redacted(engine.url))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        info = dbapi_connection.info
        note_server(label, f"{info.host}:{info.port}")


_servers: dict[str, str] = {}
_servers_lock = threading.Lock()


def note_server(url: str, server: str) -> None:
    """Record that a connection of ``url`` (a multi-host URL, redacted) reached ``server``
    (``host:port``); log it once when that is not the server its last connection reached: a
    failover made another host the primary, and every connection now goes there."""
    with _servers_lock:
        before = _servers.get(url)
        _servers[url] = server
    if before is not None and before != server:
        logger.warning("database %s: now connected to %s (was %s)", url, server, before)
    elif before is None:
        logger.debug("database %s: connected to %s", url, server)


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
        except _RECONNECTABLE as exc:
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
