"""PostgreSQL behind a pooler in transaction mode (PgBouncer ``pool_mode = transaction``).

Such a pooler hands each *transaction* (each statement, in autocommit) to whichever server
connection is free: nothing set on a database session survives to the next transaction. A
storage URL that ends in ``?pool_mode=transaction`` (the marker is removed before connecting)
makes memory_sql keep no state in the session:

- what it would set once per session (the tenant that row-level security lets a connection
  see, :mod:`memory_sql.tenancy`; the statement and lock timeouts; the UTC time zone) is set
  with ``set_config(..., true)`` (``SET LOCAL``) in front of **every statement**, in the same
  message: a read in autocommit goes as ``SELECT set_config(…); <the read>``, one simple-query
  message, which PostgreSQL runs as one implicit transaction and the pooler gives to one server
  connection; a transaction's first statement goes as ``BEGIN; SELECT set_config(…);
  <statement>``. No round trip is added, and one is saved: a read is one round trip, a
  one-statement write two (its statement, ``COMMIT``) where psycopg sends ``BEGIN`` apart;
- parameters are bound on the client (psycopg's client-side cursor) and no statement is ever
  prepared (``prepare_threshold=None``, applied after any other setting), so PgBouncer 1.18,
  which knows nothing of prepared statements, can hand the next transaction to another server;
- the queue's ``LISTEN`` needs a session of its own that lives as long as the worker:
  :func:`listen_url_of` gives the listener the ``queue.listen_url`` setting (flat
  ``listen_url``), a direct URL to PostgreSQL. Without it the worker does not listen, and finds
  due work by its sweep (``queue.sweep_interval_seconds``) and its own schedule.

Schema migrations take no session state (their advisory lock is a transaction's) but may run
long: run ``memory-sql db upgrade`` on the direct URL. See ``docs/deployment.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine

from . import tenancy

MARKER = "pool_mode"
"""The query parameter of a storage URL that says a pooler stands in front of PostgreSQL."""

TRANSACTION = "transaction"
_MODES = ("session", TRANSACTION)
_POOLED = "_memory_sql_pooled"
_LISTEN_URL = "_memory_sql_listen_url"


def split(url: URL) -> tuple[URL, bool]:
    """``url`` without the :data:`MARKER`, and whether it named transaction pooling
    (``session`` pooling keeps sessions: nothing changes)."""
    mode = url.query.get(MARKER)
    if mode is None:
        return url, False
    if isinstance(mode, tuple) or mode not in _MODES:
        raise ValueError(f"{MARKER} must be one of {', '.join(_MODES)}, not {mode!r}")
    return url.difference_update_query([MARKER]), mode == TRANSACTION


def prepare(kwargs: dict[str, Any]) -> None:
    """``create_engine``'s keyword arguments for a pooled PostgreSQL: the statements' prelude
    takes the place of the session's ``options``, and nothing is prepared (set last, over any
    ``prepare_threshold`` given)."""
    connect_args = kwargs.setdefault("connect_args", {})
    connect_args.pop("options", None)
    connect_args["cursor_factory"] = PooledCursor
    connect_args["prepare_threshold"] = None


def install(engine: Engine, *, statement_timeout: float | None) -> None:
    """Make ``engine``'s connections :class:`PooledConnection` with ``statement_timeout``."""
    limits: tuple[tuple[str, str], ...] = (("TimeZone", "UTC"),)
    if statement_timeout is not None:
        limits += (
            ("statement_timeout", str(int(statement_timeout * 1000))),
            ("lock_timeout", str(int(statement_timeout * 1000 / 3))),
        )

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        connection = PooledConnection.connect(*cargs, **cparams)
        connection.memory_sql_limits = limits
        return connection

    engine.__dict__[_POOLED] = True


def is_pooled(engine: Engine) -> bool:
    """Whether ``engine`` reaches PostgreSQL through a pooler in transaction mode."""
    return bool(engine.__dict__.get(_POOLED))


def set_listen_url(engine: Engine, url: str | None) -> None:
    """The direct URL the queue's listener of ``engine`` connects to (``queue.listen_url``)."""
    if url:
        engine.__dict__[_LISTEN_URL] = url


def listen_url_of(engine: Engine) -> str | None:
    """Where the queue's listener of ``engine`` connects: its ``listen_url``, else nowhere when
    ``engine`` is pooled (None), else ``engine``'s own database (``""``)."""
    url: str | None = engine.__dict__.get(_LISTEN_URL)
    if url:
        return url
    return None if is_pooled(engine) else ""


@functools.lru_cache(maxsize=1024)
def prelude(tenant: str, limits: tuple[tuple[str, str], ...]) -> str:
    """The statement run in front of every statement: the transaction's settings."""
    # The dialect module is in storage/, whose package imports this one: read when called.
    from .storage.dialects import dialect_of

    return dialect_of("postgresql").local_settings(((tenancy.SETTING, tenant), *limits))


class PooledConnection(psycopg.Connection[Any]):
    """A psycopg connection that holds, instead of setting them on its session, the tenant it
    acts for (written by :mod:`memory_sql.tenancy`'s checkout hook) and the limits its
    statements run under; its cursors (:class:`PooledCursor`) set both per statement."""

    memory_sql_tenant = ""  # no tenant: row-level security shows no row
    memory_sql_limits: tuple[tuple[str, str], ...] = ()
    _memory_sql_begun = False  # the statement being sent opens its transaction itself

    def memory_sql_prelude(self) -> str:
        return prelude(self.memory_sql_tenant, self.memory_sql_limits)

    @property
    def prepare_threshold(self) -> int | None:
        """None, whatever is set later (a ``database.prepare_threshold`` setting, a hook):
        behind a pooler in transaction mode nothing is prepared."""
        return None

    @prepare_threshold.setter
    def prepare_threshold(self, value: int | None) -> None:
        self._prepared.prepare_threshold = None

    def memory_sql_begin(self) -> str:
        """``BEGIN …;`` when the next statement opens a transaction (none is open, nor is the
        connection in autocommit or a pipeline), to be sent in the statement's message."""
        if (
            self.autocommit
            or self._pipeline is not None
            or self.info.transaction_status != TransactionStatus.IDLE
        ):
            return ""
        return self._get_tx_start_command().decode() + ";\n"

    def _start_query(self) -> Any:
        # psycopg sends BEGIN in a round trip of its own, unless the statement carries it.
        if self._memory_sql_begun:
            return
        yield from super()._start_query()


class PooledCursor(psycopg.ClientCursor[Any]):
    """A client-side cursor whose every statement goes with :func:`prelude` in one message."""

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> PooledCursor:
        connection = self.connection
        if not isinstance(connection, PooledConnection):
            super().execute(query, params, prepare=prepare, binary=binary)
            return self
        text = self.mogrify(query, params)
        begin = connection.memory_sql_begin()
        connection._memory_sql_begun = bool(begin)
        try:
            super().execute(f"{begin}{connection.memory_sql_prelude()};\n{text}")
        finally:
            connection._memory_sql_begun = False
        self.nextset()  # past the prelude's result (and BEGIN's) to the statement's
        if begin:
            self.nextset()
        return self

    def executemany(
        self, query: Any, params_seq: Iterable[Any], *, returning: bool = False
    ) -> None:
        connection = self.connection
        if not isinstance(connection, PooledConnection):
            super().executemany(query, params_seq, returning=returning)
            return
        first = connection.memory_sql_prelude()
        if connection.autocommit:  # one transaction, so that the prelude holds for all
            with connection.transaction():
                super().execute(first)
                super().executemany(query, params_seq, returning=returning)
        else:
            super().execute(first)
            super().executemany(query, params_seq, returning=returning)


__all__ = [
    "MARKER",
    "PooledConnection",
    "PooledCursor",
    "install",
    "is_pooled",
    "listen_url_of",
    "prepare",
    "set_listen_url",
    "split",
]
