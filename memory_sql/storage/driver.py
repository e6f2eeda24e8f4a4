"""The SQL store's fast path: its hottest statements run on the driver itself (psycopg 3,
sqlite3), past SQLAlchemy's per-call work, on connections of the engine's own pool.

Everything here falls back to SQLAlchemy rather than fail differently: a driver error on a read
raises :class:`DriverFallback` (the caller then runs SQLAlchemy's path, which reports), and
nothing runs here while someone listens to SQLAlchemy's statement events (:func:`unobserved`).

Connections come from the engine's pool, so its checkout hooks (the tenant that row-level
security sees, :mod:`memory_sql.tenancy`) apply. A few are then kept, detached from the pool,
for the next call (:class:`DriverConnection`): a pool checkout and return cost more than a
cached load's whole statement on SQLite. Those given back to the pool stay in autocommit; any
other checkout of such a connection turns autocommit off first (:func:`_leave_autocommit`), so
SQLAlchemy's connections are always as it left them.
"""

from __future__ import annotations

import functools
import operator
import os
import sqlite3
import threading
import time
import weakref
from contextlib import suppress
from datetime import datetime, timezone
from itertools import repeat
from typing import Any, Literal, cast

import psycopg
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool, QueuePool
from sqlalchemy.sql.elements import ClauseElement

from .. import tenancy
from ..driver_errors import DisconnectionError
from ..models import Fact, trusted_fact
from .dialects import dialect_of


class DriverFallback(Exception):
    """The driver's fast path could not answer; SQLAlchemy's path does the work instead."""


def _compiled(statement: sa.Executable, dialect: sa.Dialect) -> Any:
    """``statement`` compiled for the driver itself: named parameters (``%(name)s`` for
    psycopg, ``:name`` for sqlite3)."""
    compiling = cast(ClauseElement, statement)
    return compiling.compile(dialect=dialect_of(dialect).driver_paramstyle(dialect))


def driver_statement(statement: sa.Executable, dialect: sa.Dialect) -> tuple[str, dict[str, Any]]:
    """``statement`` compiled once for the driver itself: its text and its fixed parameters."""
    compiled = _compiled(statement, dialect)
    return compiled.string, dict(compiled.params)


class DriverWrite:
    """A write statement compiled once for the driver, run on a list of rows (executemany),
    each row's values bound as SQLAlchemy would bind them (its types' bind processors: UTC
    timestamps as SQLite's text)."""

    __slots__ = ("fixed", "processors", "sql")

    def __init__(self, statement: sa.Executable, dialect: sa.Dialect) -> None:
        compiled = _compiled(statement, dialect)
        self.sql = compiled.string
        self.fixed = dict(compiled.params)
        # Each type as this dialect implements it (UTCDateTime over SQLite's DATETIME, which
        # writes the text), as SQLAlchemy's own execution binds it.
        self.processors = {
            compiled.bind_names[bind]: processor
            for bind in compiled.binds.values()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }

    def parameters(self, row: dict[str, Any]) -> dict[str, Any]:
        bound = {**self.fixed, **row}
        for name, processor in self.processors.items():
            bound[name] = processor(bound[name])
        return bound

    def run(self, dbapi: Any, rows: list[dict[str, Any]]) -> Any:
        if len(rows) == 1:
            return dbapi.execute(self.sql, self.parameters(rows[0]))
        return dbapi.executemany(self.sql, list(map(self.parameters, rows)))


@functools.lru_cache(maxsize=64)
def driver_write(statement: sa.Executable, dialect: sa.Dialect) -> DriverWrite:
    """:class:`DriverWrite` of a statement built once (kept, so the key is the object)."""
    return DriverWrite(statement, dialect)


@functools.lru_cache(maxsize=256)
def compiled_for_driver(
    statement: sa.Executable, dialect: sa.Dialect
) -> tuple[str, dict[str, Any]]:
    """:func:`driver_statement` of a statement built once (kept, so the key is the object)."""
    return driver_statement(statement, dialect)


def sqlite_times(values: Any) -> list[datetime | None]:
    """Timestamps as SQLAlchemy keeps them in SQLite (ISO text, UTC, no zone), as
    UTCDateTime reads them back. The zone is parsed with the text, by C functions mapped over
    the column: ten times cheaper than ``replace(tzinfo=...)`` value by value. A column whose
    values repeat (the facts one update wrote share its time) is parsed once per value."""
    distinct = dict.fromkeys(values)
    if len(distinct) * 2 > len(values):
        return _parsed(values)
    parsed = dict(zip(distinct, _parsed(distinct), strict=True))
    return list(map(parsed.__getitem__, values))


def _parsed(values: Any) -> list[datetime | None]:
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
    if dialect_of(engine).fast_path is None:  # a database without them: SQLAlchemy's paths
        return False
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


class _Kept:
    """A driver connection kept between calls: detached from its pool (which counts it no
    more, so SQLAlchemy's own work has the whole pool), with its pool record's info (the
    tenant it is set to) and the time it connected."""

    __slots__ = ("dbapi", "info", "since")

    def __init__(self, dbapi: Any, info: dict[str, Any], since: float) -> None:
        self.dbapi = dbapi
        self.info = info
        self.since = since


class _Idle:
    """The driver connections of one engine kept between calls: a private pool of at most the
    engine's pool size (as many threads as the pool serves find one kept; none for a pool of
    one), filled from the engine's pool as calls need, last used first. A connection is counted
    from its adoption until it is closed, so one coming back always finds its place: none is
    closed for want of room, nor taken from the engine's pool only to be closed.

    ``take`` hands one out as the pool would: not one connected before the pool was last
    invalidated (a database restart seen elsewhere) nor past its recycle age, and with the
    tenant setting of the work at hand (:func:`memory_sql.tenancy.reapply`)."""

    __slots__ = ("__weakref__", "alive", "connections", "engine", "lock", "most", "pool")

    def __init__(self, engine: Engine, pool: QueuePool) -> None:
        self.engine = engine
        self.pool: QueuePool | None = pool  # None in a forked child
        self.most = pool.size() if pool.size() > 1 else 0
        self.alive = 0
        self.connections: list[_Kept] = []
        self.lock = threading.Lock()
        # Closed when the engine is collected without a dispose(); the finalizer holds the
        # list, not the engine.
        weakref.finalize(engine, _close_all, self.connections)
        _every_idle.add(self)

    def take(self) -> _Kept | None:
        connections = self.connections
        while connections:
            try:
                kept = connections.pop()
            except IndexError:  # another thread took the last one
                return None
            if self._stale(kept):
                self.discard(kept)
                continue
            try:
                tenancy.reapply(self.engine, kept.dbapi, kept.info)
            except DisconnectionError:
                self.discard(kept)
                continue
            return kept
        return None

    def _stale(self, kept: _Kept) -> bool:
        pool = self.pool
        if pool is None:  # a forked child's: none of its connections is to be used
            return True
        recycle = pool._recycle
        return pool._invalidate_time > kept.since or (
            recycle > -1 and time.time() - kept.since > recycle
        )

    def adopt(self) -> bool:
        """Whether a connection of the engine's pool, just used, may join (then it counts)."""
        with self.lock:
            if self.alive >= self.most or self.engine.pool is not self.pool:
                return False
            self.alive += 1
            return True

    def give_back(self, kept: _Kept) -> None:
        """``kept`` (idle, in autocommit) for the next call; closed if the engine was disposed
        meanwhile."""
        with self.lock:  # not between release()'s pops: a dispose would miss it
            if self.engine.pool is self.pool:
                self.connections.append(kept)
                return
        self.discard(kept)

    def discard(self, kept: _Kept) -> None:
        _close(kept)
        with self.lock:
            self.alive -= 1

    def release(self) -> None:
        """Close every kept connection idle now (those in use are closed as they come back,
        when the engine was disposed)."""
        while True:
            with self.lock:
                if not self.connections:
                    return
                kept = self.connections.pop()
            self.discard(kept)


def _close(kept: _Kept) -> None:
    with suppress(Exception):
        kept.dbapi.close()


def _close_all(connections: list[_Kept]) -> None:
    while connections:
        try:
            kept = connections.pop()
        except IndexError:
            return
        _close(kept)


_IDLE = "_memory_sql_idle_connections"
_every_idle: weakref.WeakSet[_Idle] = weakref.WeakSet()


def _idle_of(engine: Engine) -> _Idle | None:
    """The kept connections of ``engine`` (made on first use), or None for a pool that is not
    a :class:`QueuePool` (SQLite's ``:memory:``: one connection per thread)."""
    idle: _Idle | None = engine.__dict__.get(_IDLE)
    if idle is not None and idle.pool is engine.pool:
        return idle
    with _making:
        idle = cast("_Idle | None", engine.__dict__.get(_IDLE))
        pool = engine.pool
        if idle is not None and idle.pool is pool:
            return idle
        if not isinstance(pool, QueuePool):
            return None
        if idle is not None:  # the pool was made anew (a dispose we were not told of)
            idle.release()
        else:
            sa.event.listen(engine, "engine_disposed", release_idle)
        idle = engine.__dict__[_IDLE] = _Idle(engine, pool)
        return idle


_making = threading.Lock()


def release_idle(engine: Engine) -> None:
    """Close the connections the driver's path keeps for ``engine`` (at its dispose)."""
    idle = engine.__dict__.get(_IDLE)
    if idle is not None:
        idle.release()


# A forked child shares its parent's sockets: it must neither use nor close them (a
# connection object collected would say goodbye to the server on the parent's session).
_inherited: list[_Kept] = []


def _forget_in_child() -> None:
    for idle in list(_every_idle):
        _inherited.extend(idle.connections)
        idle.connections.clear()
        idle.pool = None


os.register_at_fork(after_in_child=_forget_in_child)


class DriverConnection:
    """A connection of the driver itself, in autocommit for its statements, whose results
    must be read to the end within the block (so a kept SQLite connection holds no read
    snapshot): one kept from an earlier call, else one checked out of the engine's pool (its
    checkout hooks run), kept afterwards if there is room, else given back.

    A driver error raises :class:`DriverFallback` or, with ``raising``, SQLAlchemy's wrapper
    of it; a connection found dead is discarded, with the kept ones. A connection not to be had
    raises SQLAlchemy's wrapper of the driver's error, as ``engine.connect()`` would (the pool
    hands the raw one on).

    A class, not a generator: it runs on every load and save."""

    __slots__ = ("engine", "fairy", "idle", "kept", "raising")

    def __init__(self, engine: Engine, *, raising: bool = False) -> None:
        self.engine = engine
        self.raising = raising

    def __enter__(self) -> Any:
        engine = self.engine
        idle = self.idle = _idle_of(engine)
        if idle is not None:
            kept = self.kept = idle.take()
            if kept is not None:
                return kept.dbapi
        else:
            self.kept = None
        dialect = engine.dialect
        postgres = dialect_of(dialect).fast_path == "psycopg"
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
        dbapi: Any = fairy.driver_connection
        if postgres and not dbapi.autocommit:
            try:
                dbapi.autocommit = True
            except BaseException as exc:
                self.__exit__(type(exc), exc, None)
                raise
            fairy.info[_AUTOCOMMIT_LEFT] = True
        return dbapi

    def __exit__(self, exc_type: Any, exc: Any, _tb: Any) -> Literal[False]:
        kept, idle = self.kept, self.idle
        if exc is None:
            if kept is not None:
                cast(_Idle, idle).give_back(kept)  # kept comes from idle
            elif idle is not None and idle.adopt():
                self._keep_checked_out(idle)
            else:
                self.fairy.close()
            return False
        dialect = self.engine.dialect
        driver_error: type[Exception] = dialect.loaded_dbapi.Error
        dbapi = kept.dbapi if kept is not None else self.fairy.dbapi_connection
        dead = False
        try:
            if not isinstance(exc, driver_error):
                return False
            dead = dialect.is_disconnect(cast(Any, exc), dbapi, None)
            if dead:
                if kept is None:
                    self.fairy.invalidate(exc)
                if idle is not None:  # they met the same restart, most likely
                    idle.release()
            if not self.raising:
                raise DriverFallback from exc
            raise sa_exc.DBAPIError.instance(
                None, None, exc, driver_error, connection_invalidated=dead, dialect=dialect
            ) from exc
        finally:
            if kept is None:
                self.fairy.close()
            elif not dead and _between_transactions(dbapi):  # a refused statement, say
                cast(_Idle, idle).give_back(kept)
            else:
                cast(_Idle, idle).discard(kept)

    def _keep_checked_out(self, idle: _Idle) -> None:
        fairy = self.fairy
        record = fairy._connection_record
        since = record.starttime if record is not None else 0.0
        dbapi = fairy.dbapi_connection
        fairy.detach()  # the pool counts it no more, and will not close it
        idle.give_back(_Kept(dbapi, fairy.info, since))


def _between_transactions(dbapi: Any) -> bool:
    """Whether a driver connection holds no transaction (so it may serve the next call)."""
    try:
        if isinstance(dbapi, sqlite3.Connection):
            return not dbapi.in_transaction
        return bool(dbapi.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)
    except Exception:  # closed, or broken: not to be used again
        return False


def read_facts_by_driver(
    engine: Engine, statement: sa.Select[Any], parameters: dict[str, Any], scoped: int
) -> list[tuple[tuple[Any, ...], Fact]] | None:
    """The rows of ``statement`` (a read built once and kept: its compiled text is cached),
    run on the driver itself in one autocommit round trip: each row's first ``scoped``
    columns, and the :class:`Fact` of the :data:`~memory_sql.schema.FACT_COLUMNS` after them.

    None, having read nothing, when SQLAlchemy must run it (someone listens to its statement
    events) or the driver failed on it (SQLAlchemy's path then reads, and reports); a
    connection not to be had raises SQLAlchemy's error, as ``engine.connect()`` would."""
    if not unobserved(engine):
        return None
    postgres = dialect_of(engine).fast_path == "psycopg"
    sql, fixed = compiled_for_driver(statement, engine.dialect)
    try:
        with DriverConnection(engine) as dbapi:
            rows = dbapi.execute(sql, {**fixed, **parameters} if fixed else parameters).fetchall()
            utc = postgres and dbapi.info.timezone is timezone.utc
        if not rows:
            return []
        columns: list[Any] = list(zip(*rows, strict=True))
        created, updated = columns[scoped + 6], columns[scoped + 7]
        # then expected_valid_days, confirmed_at, confirmation_count, valid_from (and, where
        # selected, valid_to and superseded_by)
        aging = list(columns[scoped + 8 :])
        if not utc:
            times = pg_times if postgres else sqlite_times
            created, updated = times(created), times(updated)
            for i in (i for i in (1, 3, 4) if i < len(aging)):
                aging[i] = times(aging[i])
        facts = map(trusted_fact, *columns[scoped : scoped + 6], created, updated, *aging)
        return list(zip(zip(*columns[:scoped], strict=True), facts, strict=True))
    except DriverFallback:
        return None
    except (ValueError, TypeError, AttributeError, IndexError):
        return None
