"""The SQL store's fast path: its hottest statements run on the driver itself (psycopg 3,
sqlite3), past SQLAlchemy's per-call work, on connections of the engine's own pool.

Everything here falls back to SQLAlchemy rather than fail differently: a driver error on a read
raises :class:`DriverFallback` (the caller then runs SQLAlchemy's path, which reports), and
nothing runs here while someone listens to SQLAlchemy's statement events (:func:`unobserved`).

Connections come from the engine's pool, so its checkout hooks (the tenant that row-level
security sees, :mod:`memory_sql.tenancy`) apply. A few of them are kept checked out between
calls, idle, for the next call (:class:`DriverConnection`): a pool checkout and return cost
more than a cached load's whole statement on SQLite. They stay in autocommit between calls;
any other checkout of such a connection turns autocommit off first (:func:`_leave_autocommit`),
so SQLAlchemy's connections are always as it left them.
"""

from __future__ import annotations

import functools
import operator
import os
import threading
import time
import weakref
from contextlib import suppress
from datetime import datetime, timezone
from itertools import repeat
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool, QueuePool

from .. import tenancy
from ..models import Fact, trusted_fact


class DriverFallback(Exception):
    """The driver's fast path could not answer; SQLAlchemy's path does the work instead."""


def driver_statement(statement: sa.Executable, dialect: sa.Dialect) -> tuple[str, dict]:
    """``statement`` compiled once for the driver itself: its text, with named parameters
    (``%(name)s`` for psycopg, ``:name`` for sqlite3), and its fixed parameters."""
    if dialect.name == "sqlite":
        dialect = type(dialect)(paramstyle="named")
    compiled = statement.compile(dialect=dialect)
    return compiled.string, dict(compiled.params)


@functools.lru_cache(maxsize=256)
def compiled_for_driver(statement: sa.Executable, dialect: sa.Dialect) -> tuple[str, dict]:
    """:func:`driver_statement` of a statement built once (kept, so the key is the object)."""
    return driver_statement(statement, dialect)


def sqlite_times(values: Any) -> list[datetime | None]:
    """Timestamps as SQLAlchemy keeps them in SQLite (ISO text, UTC, no zone), as
    UTCDateTime reads them back. The zone is parsed with the text, by C functions mapped over
    the column: ten times cheaper than ``replace(tzinfo=...)`` value by value."""
    try:
        return list(map(_from_iso, map(operator.add, values, repeat("+00:00"))))
    except (TypeError, ValueError):  # NULLs, or text with a zone of its own
        return [_sqlite_time(value) for value in values]


def _sqlite_time(value: Any) -> datetime | None:
    if value is None:
        return None
    moment = _from_iso(value)
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


_from_iso = datetime.fromisoformat


def pg_times(values: Any) -> list[datetime | None]:
    """Timestamps of a session in another time zone than UTC, in UTC."""
    return [
        value if value is None or value.tzinfo is timezone.utc else value.astimezone(timezone.utc)
        for value in values
    ]


def unobserved(engine: Engine) -> bool:
    """Whether statements may bypass SQLAlchemy: nobody listens to its statement events
    (tests, tracing instrumentation) nor has it echo them."""
    dispatch = engine.dispatch
    return not (dispatch.before_cursor_execute or dispatch.after_cursor_execute or engine.echo)


# The listener is on the Pool class, set at import: adding one to a pool in use would race with
# the threads iterating its listeners.
_local = threading.local()
_AUTOCOMMIT_LEFT = "memory_sql.autocommit_left"


def _leave_autocommit(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """Pool ``checkout``: a connection the driver's path left in autocommit goes back to
    transactions, unless the driver's path itself is checking it out."""
    if record.info.get(_AUTOCOMMIT_LEFT) and not getattr(_local, "driver", False):
        try:
            dbapi_connection.autocommit = False
        except Exception as exc:  # a pooled connection found dead: the pool takes another
            raise sa_exc.DisconnectionError(f"cannot end autocommit: {exc}") from exc
        del record.info[_AUTOCOMMIT_LEFT]


sa.event.listen(Pool, "checkout", _leave_autocommit)


class _Idle:
    """The connections of one engine kept checked out between driver calls (at most half its
    pool's size, so that SQLAlchemy's own work finds pooled connections), last used first.

    ``take`` hands one out as the pool would: not one the pool has invalidated since (a
    database restart seen elsewhere) or past its recycle age, and with the tenant setting of
    the work at hand (:func:`memory_sql.tenancy.reapply`)."""

    __slots__ = ("__weakref__", "connections", "engine", "most", "pool")

    def __init__(self, engine: Engine, pool: QueuePool) -> None:
        self.engine = engine
        self.pool = pool
        self.most = max(1, pool.size() // 2)
        self.connections: list[Any] = []
        _every_idle.add(self)

    def take(self) -> Any | None:
        connections = self.connections
        while connections:
            try:
                fairy = connections.pop()
            except IndexError:  # another thread took the last one
                return None
            record = fairy._connection_record
            if record is None or self._stale(record):
                _discard(fairy)
                continue
            try:
                tenancy.reapply(self.engine, fairy.driver_connection, fairy.info)
            except sa_exc.DisconnectionError as exc:
                _discard(fairy, exc)
                continue
            return fairy
        return None

    def _stale(self, record: Any) -> bool:
        recycle = self.pool._recycle
        return record._is_hard_or_soft_invalidated() or (
            recycle > -1 and time.time() - record.starttime > recycle
        )

    def keep(self, fairy: Any) -> bool:
        """Keep ``fairy`` (idle, in autocommit) for the next call, if there is room."""
        if len(self.connections) >= self.most or self.engine.pool is not self.pool:
            return False
        self.connections.append(fairy)
        return True

    def release(self, *, close: bool = False) -> None:
        """Give every kept connection back to its pool (``close``: closed, as a disposed
        engine's are)."""
        while self.connections:
            try:
                fairy = self.connections.pop()
            except IndexError:
                return
            if close:
                _discard(fairy)
            else:
                fairy.close()

    def __del__(self) -> None:  # an engine dropped without dispose(): check them in quietly
        with suppress(Exception):
            self.release()


def _discard(fairy: Any, exc: BaseException | None = None) -> None:
    try:
        fairy.invalidate(exc)
    finally:
        fairy.close()


_IDLE = "_memory_sql_idle_connections"
_every_idle: weakref.WeakSet[_Idle] = weakref.WeakSet()


def _idle_of(engine: Engine) -> _Idle | None:
    """The kept connections of ``engine`` (made on first use), or None for a pool that is not
    a :class:`QueuePool` (SQLite's ``:memory:``: one connection per thread)."""
    idle = engine.__dict__.get(_IDLE)
    if idle is not None and idle.pool is engine.pool:
        return idle
    with _making:
        idle = engine.__dict__.get(_IDLE)
        pool = engine.pool
        if idle is not None and idle.pool is pool:
            return idle
        if not isinstance(pool, QueuePool):
            return None
        if idle is not None:  # the pool was made anew (a dispose we were not told of)
            idle.release(close=True)
        else:
            sa.event.listen(engine, "engine_disposed", release_idle)
        idle = engine.__dict__[_IDLE] = _Idle(engine, pool)
        return idle


_making = threading.Lock()


def release_idle(engine: Engine, *, close: bool = True) -> None:
    """Close the connections the driver's path keeps idle for ``engine`` (at its dispose), or
    with ``close=False`` give them back to its pool."""
    idle = engine.__dict__.get(_IDLE)
    if idle is not None:
        idle.release(close=close)


def _forget_in_child() -> None:
    # A forked child shares its parent's sockets: it must neither use nor close them.
    for idle in list(_every_idle):
        idle.connections.clear()
        idle.pool = None  # type: ignore[assignment]


os.register_at_fork(after_in_child=_forget_in_child)


class DriverConnection:
    """A pooled connection of the driver itself, in autocommit for its statements, whose
    results must be read to the end within the block (so a kept SQLite connection holds no
    read snapshot). A driver error raises :class:`DriverFallback` or, with ``raising``,
    SQLAlchemy's wrapper of it; a connection found dead is discarded, with the idle ones. A
    connection not to be had raises SQLAlchemy's wrapper of the driver's error, as
    ``engine.connect()`` would (the pool hands the raw one on).

    A class, not a generator: it runs on every load and save."""

    __slots__ = ("engine", "fairy", "idle", "raising")

    def __init__(self, engine: Engine, *, raising: bool = False) -> None:
        self.engine = engine
        self.raising = raising

    def __enter__(self) -> Any:
        engine = self.engine
        idle = self.idle = _idle_of(engine)
        if idle is not None:
            fairy = idle.take()
            if fairy is not None:
                self.fairy = fairy
                return fairy.driver_connection
        dialect = engine.dialect
        postgres = dialect.name == "postgresql"
        if postgres:
            _local.driver = True
        try:
            fairy = engine.raw_connection()
        except dialect.loaded_dbapi.Error as exc:
            raise sa_exc.DBAPIError.instance(
                None, None, exc, dialect.loaded_dbapi.Error, dialect=dialect
            ) from exc
        finally:
            if postgres:
                _local.driver = False
        self.fairy = fairy
        dbapi = fairy.driver_connection
        if postgres and not dbapi.autocommit:
            try:
                dbapi.autocommit = True
            except BaseException as exc:
                self.__exit__(type(exc), exc, None)
                raise
            fairy.info[_AUTOCOMMIT_LEFT] = True
        return dbapi

    def __exit__(self, exc_type: Any, exc: Any, _tb: Any) -> bool:
        fairy = self.fairy
        if exc is None:
            idle = self.idle
            if idle is None or not idle.keep(fairy):
                fairy.close()
            return False
        try:
            dialect = self.engine.dialect
            driver_error: type[Exception] = dialect.loaded_dbapi.Error
            if not isinstance(exc, driver_error):
                return False
            dead = dialect.is_disconnect(exc, fairy.dbapi_connection, None)
            if dead:
                fairy.invalidate(exc)
                if self.idle is not None:  # they met the same restart, most likely
                    self.idle.release(close=True)
            if not self.raising:
                raise DriverFallback from exc
            raise sa_exc.DBAPIError.instance(
                None, None, exc, driver_error, connection_invalidated=dead, dialect=dialect
            ) from exc
        finally:
            fairy.close()


def read_facts_by_driver(
    engine: Engine, statement: sa.Select, parameters: dict[str, Any], scoped: int
) -> list[tuple[tuple[Any, ...], Fact]] | None:
    """The rows of ``statement`` (a read built once and kept: its compiled text is cached),
    run on the driver itself in one autocommit round trip: each row's first ``scoped``
    columns, and the :class:`Fact` of the :data:`~memory_sql.schema.FACT_COLUMNS` after them.

    None, having read nothing, when SQLAlchemy must run it (someone listens to its statement
    events) or the driver failed on it (SQLAlchemy's path then reads, and reports); a
    connection not to be had raises SQLAlchemy's error, as ``engine.connect()`` would."""
    if not unobserved(engine):
        return None
    postgres = engine.dialect.name == "postgresql"
    sql, fixed = compiled_for_driver(statement, engine.dialect)
    try:
        with DriverConnection(engine) as dbapi:
            rows = dbapi.execute(sql, {**fixed, **parameters} if fixed else parameters).fetchall()
            utc = postgres and dbapi.info.timezone is timezone.utc
        if not rows:
            return []
        columns = list(zip(*rows, strict=True))
        created, updated = columns[scoped + 6], columns[scoped + 7]
        if not utc:
            times = pg_times if postgres else sqlite_times
            created, updated = times(created), times(updated)
        facts = map(trusted_fact, *columns[scoped : scoped + 6], created, updated)
        return list(zip(zip(*columns[:scoped], strict=True), facts, strict=True))
    except DriverFallback:
        return None
    except (ValueError, TypeError, AttributeError, IndexError):
        return None
