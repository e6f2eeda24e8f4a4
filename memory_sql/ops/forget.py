"""Whether a user has memories (and at which versions), and forgetting a user.

The queries live in :mod:`memory_sql.storage.forget` (SQL stays in ``storage/``); these take
the storage (its :data:`~memory_sql.storage.capabilities.Capability.OPERATIONS`; an engine is
taken as it is).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from ..storage import forget
from ..storage.base import MemoryStorage
from ..storage.capabilities import engine_for


def memory_exists(
    storage: MemoryStorage | Engine,
    user_id: str,
    *,
    agent_name: str | None = None,
    tenant_id: str | None = None,
) -> bool:
    """:func:`memory_sql.storage.forget.memory_exists` on ``storage``."""
    engine = engine_for(storage, needed_by="memory_exists")
    return forget.memory_exists(engine, user_id, agent_name=agent_name, tenant_id=tenant_id)


def memory_versions(
    storage: MemoryStorage | Engine, user_id: str, *, tenant_id: str | None = None
) -> dict[str | None, int]:
    """:func:`memory_sql.storage.forget.memory_versions` on ``storage``."""
    engine = engine_for(storage, needed_by="memory_versions")
    return forget.memory_versions(engine, user_id, tenant_id=tenant_id)


def forget_user(
    storage: MemoryStorage | Engine, user_id: str, *, tenant_id: str = "default"
) -> dict[str, int]:
    """:func:`memory_sql.storage.forget.forget_user` on ``storage``."""
    engine = engine_for(storage, needed_by="forgetting a user")
    return forget.forget_user(engine, user_id, tenant_id=tenant_id)
