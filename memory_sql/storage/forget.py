"""Whether a user has memories (and at which versions), and forgetting a user: every row of
theirs, in one transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..schema import (
    memory_fact_events,
    memory_facts,
    memory_pending_updates,
    memory_scopes,
    memory_sections,
)
from ..scope import Scope
from .dialects import write_options

# Children before parents, so nothing depends on ON DELETE CASCADE (or on SQLite's foreign_keys
# pragma) and each count is what that statement deleted.
_FORGET_ORDER = (
    memory_facts,
    memory_sections,
    memory_fact_events,
    memory_pending_updates,
    memory_scopes,
)


_FORGET = {
    table.name: sa.delete(table).where(
        table.c.tenant_id == sa.bindparam("tenant"), table.c.user_id == sa.bindparam("user")
    )
    for table in _FORGET_ORDER
}


_REPORTED_ORDER = (
    "memory_scopes",
    "memory_sections",
    "memory_facts",
    "memory_pending_updates",
    "memory_fact_events",
)


def memory_exists(
    engine: Engine, user_id: str, *, agent_name: str | None = None, tenant_id: str | None = None
) -> bool:
    """Whether ``user_id`` of ``tenant_id`` has a stored memory (of ``agent_name``; of any
    agent when None).

    Raises:
        InvalidScopeError: a name is malformed.
        StorageError: the database failed.
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    conditions = [
        memory_scopes.c.tenant_id == scope.tenant_id,
        memory_scopes.c.user_id == scope.user_id,
    ]
    if agent_name is not None:
        conditions.append(memory_scopes.c.agent_name == scope.agent_key)
    statement = sa.select(sa.literal(1)).where(*conditions).limit(1)
    with database_errors(engine, f"read the memories of {scope}"), engine.connect() as conn:
        return conn.execute(statement).first() is not None


def memory_versions(
    engine: Engine, user_id: str, *, tenant_id: str | None = None
) -> dict[str | None, int]:
    """The version of each stored memory of ``user_id`` in ``tenant_id``, by agent name (None:
    the unnamed agents' memory).

    Raises:
        InvalidScopeError: a name is malformed.
        StorageError: the database failed.
    """
    scope = Scope.of(user_id=user_id, tenant_id=tenant_id)
    statement = sa.select(memory_scopes.c.agent_name, memory_scopes.c.version).where(
        memory_scopes.c.tenant_id == scope.tenant_id, memory_scopes.c.user_id == scope.user_id
    )
    with database_errors(engine, f"read the memories of {scope}"), engine.connect() as conn:
        return {agent or None: version for agent, version in conn.execute(statement)}


def forget_user(engine: Engine, user_id: str, *, tenant_id: str = "default") -> dict[str, int]:
    """Delete every row of ``user_id`` in ``tenant_id`` — all memories (any agent), their
    sections and facts, waiting updates and the fact history — in one transaction.

    Returns the rows deleted per table (``memory_scopes``, ``memory_sections``,
    ``memory_facts``, ``memory_pending_updates``, ``memory_fact_events``). An update already
    running for the user in a worker may still save a memory after this returns: stop the
    workers first, or forget again.

    Raises:
        InvalidScopeError: ``user_id`` or ``tenant_id`` is malformed.
        StorageError: the database failed; nothing was deleted.
    """
    scope = Scope.of(user_id=user_id, tenant_id=tenant_id)
    params = {"tenant": scope.tenant_id, "user": scope.user_id}
    deleted: dict[str, int] = {}
    what = f"forget {scope.tenant_id}/{scope.user_id}"
    with database_errors(engine, what), _write(engine) as conn:
        for table in _FORGET_ORDER:
            deleted[table.name] = conn.execute(_FORGET[table.name], params).rowcount
    return {name: deleted[name] for name in _REPORTED_ORDER}


@contextmanager
def _write(engine: Engine) -> Iterator[sa.Connection]:
    """A write transaction; on SQLite it takes the write lock at BEGIN."""
    with engine.connect().execution_options(**write_options(engine)) as conn, conn.begin():
        yield conn
