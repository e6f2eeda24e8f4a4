"""What happened to a memory's facts, from ``memory_fact_events`` (one row per fact a save
added, updated or removed): a fact's history and a memory's change log, oldest first, paged
forward by a cursor.

Events keep a fact's category and confidence at each change and, since revision 0015, its
text before and after (``content_before``: updated and removed; ``content_after``: added and
updated) and, for a removed fact, the fact that took its place (``superseded_by``); events
written before that revision have no text (``None``). An update that kept the text stores
it once; it is read back as both. Forgetting a memory deletes its events with it. Events are
ordered by version (oldest first), then fact id, the order they happened in; a page gives the
cursor of its last event, an opaque string the next page starts after. New events come after
it, so a reader that keeps the cursor of its last page reads, later, only what happened since.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..models import format_timestamp
from ..schema import memory_fact_events as events
from ..scope import Scope

_COLUMNS = (
    events.c.version,
    events.c.fact_id,
    events.c.event,
    events.c.category,
    events.c.confidence,
    events.c.occurred_at,
    events.c.content_before,
    events.c.content_after,
    events.c.superseded_by,
)


def change_log(
    engine: Engine,
    scope: Scope,
    *,
    fact_id: str | None = None,
    after: str | None = None,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], str | None]:
    """The events of ``scope``'s memory (only of ``fact_id`` if given), oldest first: each
    ``version``, ``fact_id``, ``event`` (added, updated, removed), ``category``,
    ``confidence``, ``occurred_at``, ``content_before``, ``content_after`` and
    ``superseded_by``; at most ``limit``, those after the cursor ``after``.
    Returns them and the cursor of the next page (None: this was the last, for now).

    Raises:
        ValueError: ``limit`` below 1, or a malformed cursor.
        StorageError: the database failed.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if fact_id is not None and ("\x00" in fact_id or len(fact_id) > 64):
        return [], None  # no fact has such an id (and PostgreSQL text cannot hold a NUL)
    statement = (
        sa.select(*_COLUMNS)
        .where(
            events.c.tenant_id == scope.tenant_id,
            events.c.user_id == scope.user_id,
            events.c.agent_name == scope.agent_key,
        )
        .order_by(events.c.version, events.c.fact_id)
        .limit(limit + 1)
    )
    if fact_id is not None:
        statement = statement.where(events.c.fact_id == fact_id)
    if after is not None:
        version, last_fact = _cursor(after)
        statement = statement.where(
            sa.or_(
                events.c.version > version,
                sa.and_(events.c.version == version, events.c.fact_id > last_fact),
            )
        )
    with database_errors(engine, f"read the change log of {scope}"), engine.connect() as conn:
        rows = conn.execute(statement).all()
    page = [
        {
            "version": row.version,
            "fact_id": row.fact_id,
            "event": row.event,
            "category": row.category,
            "confidence": row.confidence,
            "occurred_at": format_timestamp(row.occurred_at),
            "content_before": row.content_after
            if row.event == "updated" and row.content_before is None
            else row.content_before,
            "content_after": row.content_after,
            "superseded_by": row.superseded_by,
        }
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return page, cursor_of(page[-1]["version"], page[-1]["fact_id"]) if more else None


_CURSOR = re.compile(r"([0-9]{1,10}):([^\x00]{1,64})")
_MAX_VERSION = 2**31 - 1  # the version column is a 32-bit integer


def cursor_of(version: int, fact_id: str) -> str:
    """The opaque cursor of the event (``version``, ``fact_id``): a page starts after it."""
    return base64.urlsafe_b64encode(f"{version}:{fact_id}".encode()).decode().rstrip("=")


def _cursor(text: str) -> tuple[int, str]:
    try:
        decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        decoded = ""
    match = _CURSOR.fullmatch(decoded)
    if match is None or int(match.group(1)) > _MAX_VERSION:
        raise ValueError(f"cursor must be one a page of this change log gave, not {text!r}")
    return int(match.group(1)), match.group(2)


__all__ = ["change_log"]
