"""Whether a user has memories (and at which versions), and forgetting a user.

The queries live in :mod:`memory_sql.storage.forget` (SQL stays in ``storage/``); these
are their names in ``ops``.
"""

from __future__ import annotations

from ..storage.forget import forget_user as forget_user
from ..storage.forget import memory_exists as memory_exists
from ..storage.forget import memory_versions as memory_versions
