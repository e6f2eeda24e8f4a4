"""What happened to a memory's facts: the change log of ``memory_fact_events``.

The queries live in :mod:`memory_sql.storage.history` (SQL stays in ``storage/``); these
are their names in ``ops``.
"""

from __future__ import annotations

from ..storage.history import change_log as change_log
from ..storage.history import cursor_of as cursor_of
