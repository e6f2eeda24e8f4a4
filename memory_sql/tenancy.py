"""Which tenant's rows a PostgreSQL connection may see: the setting row-level security reads.

Migration 0010 enables and forces row-level security on every memory table, with two policies:
a row is visible (and may be written) when its ``tenant_id`` equals the session setting
``memory_sql.tenant_id``, or when that setting is ``*`` (:data:`ALL_TENANTS`). A connection
that set nothing sees no row at all, so a query that forgets its ``WHERE tenant_id`` returns
nothing of another tenant instead of everything.

The setting comes from the code that uses the connection, never from a client:

    with acting_for("acme"):
        storage.load(user_id="u1")      # its connection is set to "acme" when checked out

:func:`guard_engine` makes an engine write the tenant being acted for into each connection it
hands out, and skips the write when the connection already holds that value, so a process
serving one tenant at a time pays one round trip per pooled connection, not per query. (A
``SET LOCAL`` per transaction would cost a transaction around every read, which are
single-statement autocommit reads here, and a round trip each.) Outside any
:func:`acting_for`, the engine's ``default`` applies: :data:`ALL_TENANTS` for the library, the
CLI and the worker, which are operators of the whole database and filter by tenant
themselves; :data:`NO_TENANT` for the HTTP service, whose every request acts for its key's
tenant. The queue is shared by all tenants: its calls act for :data:`ALL_TENANTS`.

This is a guard against a forgotten filter, not against a caller who can run SQL of its own:
any role that can connect can set the setting. The setting lives for the database session, so
connections must be the database's own sessions (direct, or a pooler in session mode): a pooler
in transaction mode would run one tenant's queries in a session set for another. SQLite has no
row-level security; there the setting does not exist and the tenant filters in every query are
the only isolation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from .driver_errors import as_disconnection

SETTING = "memory_sql.tenant_id"
"""The PostgreSQL setting the policies compare ``tenant_id`` to."""

ALL_TENANTS = "*"
"""The setting's value that lets a connection see every tenant (a tenant id cannot be ``*``)."""

NO_TENANT = ""
"""The setting's value that matches no row."""

_AS_IT_IS = "\x00as it is"  # acted for by work that reads no table under row-level security

_acting: ContextVar[str | None] = ContextVar("memory_sql_acting_tenant", default=None)


@contextmanager
def acting_for(tenant_id: str) -> Iterator[None]:
    """Connections checked out in this block (this thread or task) see ``tenant_id``'s rows."""
    token = _acting.set(tenant_id)
    try:
        yield
    finally:
        _acting.reset(token)


@contextmanager
def outside_row_security() -> Iterator[None]:
    """For work that reads no table under row-level security (the service's key check): the
    connections checked out in this block keep whatever tenant they were set to, at no round
    trip. Never for a memory table: a query there would see that last tenant's rows."""
    token = _acting.set(_AS_IT_IS)
    try:
        yield
    finally:
        _acting.reset(token)


SetSession = Callable[[Any, str, str], None]
"""Sets a session setting on a driver connection (``dbapi_connection, name, value``), outside
any transaction: the dialect's :meth:`~memory_sql.storage.dialects.SQLDialect.set_session`."""


def guard_engine(engine: Engine, *, default: str = ALL_TENANTS, set_session: SetSession) -> None:
    """Make ``engine`` (PostgreSQL) set :data:`SETTING` on every connection it hands out to the
    tenant acted for, or to ``default``, through ``set_session`` (the database's own way)."""
    guard = _TenantGuard(default, set_session)
    event.listen(engine, "checkout", guard.on_checkout)
    engine.__dict__[_GUARD] = guard


def reapply(engine: Engine, dbapi_connection: Any, info: dict[str, Any]) -> None:
    """What ``engine``'s checkout hook does, for a connection it handed out earlier and that is
    used again without a checkout (``info``: its pool record's). Raises ``DisconnectionError``
    on a connection found dead."""
    guard = engine.__dict__.get(_GUARD)
    if guard is not None:
        guard.apply(dbapi_connection, info)


_GUARD = "_memory_sql_tenant_guard"


class _TenantGuard:
    __slots__ = ("default", "set_session")

    def __init__(self, default: str, set_session: SetSession) -> None:
        self.default = default
        self.set_session = set_session

    def on_checkout(self, dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        self.apply(dbapi_connection, record.info)

    def apply(self, dbapi_connection: Any, info: dict[str, Any]) -> None:
        tenant = _acting.get()
        if tenant is None:
            tenant = self.default
        if tenant == _AS_IT_IS or info.get(SETTING) == tenant:
            return
        # A session-level value, written outside any transaction so that no rollback undoes it;
        # the record's info lives as long as this DBAPI connection. A pooled connection found
        # dead: the pool discards it and checks out another.
        with as_disconnection(f"cannot set {SETTING}"):
            self.set_session(dbapi_connection, SETTING, tenant)
        info[SETTING] = tenant


__all__ = [
    "ALL_TENANTS",
    "NO_TENANT",
    "SETTING",
    "acting_for",
    "guard_engine",
    "outside_row_security",
    "reapply",
]
