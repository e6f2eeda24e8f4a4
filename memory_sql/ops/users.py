"""The users of a tenant, with their memories and facts counted.

The queries live in :mod:`memory_sql.storage.users` (SQL stays in ``storage/``); these
are their names in ``ops``.
"""

from __future__ import annotations

from ..storage.users import UserSummary as UserSummary
from ..storage.users import list_users as list_users
