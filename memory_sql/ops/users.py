"""The users of a tenant, with their memories and facts counted.

The queries live in :mod:`memory_sql.storage.users` (SQL stays in ``storage/``); this takes
the storage (an engine is taken as it is).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from ..storage import users
from ..storage.base import MemoryStorage
from ..storage.capabilities import engine_for
from ..storage.users import UserSummary as UserSummary


def list_users(
    storage: MemoryStorage | Engine,
    *,
    tenant_id: str,
    contains: str | None = None,
    user_id: str | None = None,
    limit: int = 100,
) -> list[UserSummary]:
    """:func:`memory_sql.storage.users.list_users` on ``storage``."""
    engine = engine_for(storage, needed_by="listing users")
    return users.list_users(
        engine, tenant_id=tenant_id, contains=contains, user_id=user_id, limit=limit
    )
