"""The stored watermarks of threads: how far each conversation was learned from.

One row per (tenant, user, agent, thread) in ``memory_watermarks`` (Alembic revision 0008), in
the queue's database (the ``watermarks`` capability of a SQL storage). What a mark means and how
a conversation is cut at it: :mod:`memory_sql.update.watermark`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..models import utcnow
from ..schema import memory_watermarks
from ..scope import Scope
from .dialects import SQLDialect, dialect_of
from .driver import DriverConnection, DriverFallback, compiled_for_driver, unobserved


@dataclass(frozen=True)
class Mark:
    """A stored watermark: the key of the last message learned from, and its position."""

    message_key: str
    position: int


def has_table(engine: Engine) -> bool:
    """Whether the database has the watermark table (revision 0008 or later)."""
    return sa.inspect(engine).has_table(memory_watermarks.name)


_w = memory_watermarks.c
_KEY_COLUMNS = ("tenant_id", "user_id", "agent_name", "thread_id")
_LOAD = sa.select(_w.message_key, _w.position).where(
    *(_w[name] == sa.bindparam(f"key_{name}") for name in _KEY_COLUMNS)
)


def load(engine: Engine, scope: Scope, thread_id: str) -> Mark | None:
    """The stored watermark of a thread, if any (one autocommit round trip on the driver
    where it can, else SQLAlchemy's)."""
    parameters = _key(scope, thread_id)
    if unobserved(engine):
        sql, _ = compiled_for_driver(_LOAD, engine.dialect)
        try:
            with DriverConnection(engine) as dbapi:
                rows = dbapi.execute(sql, parameters).fetchall()
            return Mark(*rows[0]) if rows else None
        except DriverFallback:
            pass  # SQLAlchemy's path reads it, and reports what fails
    with engine.connect() as conn:
        row = conn.execute(_LOAD, parameters).first()
    return Mark(row.message_key, row.position) if row is not None else None


def move_on(conn: Connection, scope: Scope, thread_id: str, mark: Mark) -> None:
    """Store ``mark`` as the thread's watermark, on ``conn`` (in the caller's transaction)."""
    values = {"message_key": mark.message_key, "position": mark.position, "updated_at": utcnow()}
    conn.execute(upsert(dialect_of(conn)), {**_key(scope, thread_id), **values})


def move(engine: Engine, scope: Scope, thread_id: str, mark: Mark) -> None:
    """:func:`move_on` in a transaction of its own."""
    with engine.begin() as conn:
        move_on(conn, scope, thread_id, mark)


def _key(scope: Scope, thread_id: str) -> dict[str, Any]:
    return {
        "key_tenant_id": scope.tenant_id,
        "key_user_id": scope.user_id,
        "key_agent_name": scope.agent_name or "",
        "key_thread_id": thread_id,
    }


@functools.cache
def upsert(dialect: SQLDialect) -> Any:
    """The thread's row inserted, or its mark moved when it has one: one statement."""
    return dialect.upsert(
        memory_watermarks,
        {
            **{name: sa.bindparam(f"key_{name}") for name in _KEY_COLUMNS},
            "message_key": sa.bindparam("message_key"),
            "position": sa.bindparam("position"),
            "updated_at": sa.bindparam("updated_at"),
        },
        keys=_KEY_COLUMNS,
        set_=("message_key", "position", "updated_at"),
    )
