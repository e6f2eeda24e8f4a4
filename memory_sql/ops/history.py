"""What happened to a memory's facts: the change log of ``memory_fact_events``.

The queries live in :mod:`memory_sql.storage.history` (SQL stays in ``storage/``); the texts
they return are shown here with any secret stored before redaction existed replaced
(:mod:`memory_sql.intake.redact`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from ..intake.redact import DEFAULT
from ..scope import Scope
from ..storage import history
from ..storage.base import MemoryStorage
from ..storage.capabilities import Capability, engine_for
from ..storage.history import cursor_of as cursor_of


def change_log(
    storage: MemoryStorage | Engine,
    scope: Scope,
    *,
    fact_id: str | None = None,
    after: str | None = None,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], str | None]:
    """:func:`memory_sql.storage.history.change_log` of ``storage``, its texts shown
    redacted."""
    engine = engine_for(storage, Capability.HISTORY, needed_by="the change log")
    events, cursor = history.change_log(engine, scope, fact_id=fact_id, after=after, limit=limit)
    for event in events:
        for key in ("content_before", "content_after"):
            if event[key] is not None:
                event[key] = DEFAULT(event[key])
    return events, cursor


__all__ = ["change_log", "cursor_of"]
