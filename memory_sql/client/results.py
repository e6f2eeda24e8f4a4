"""What the client returns: the service's answers as typed models.

Each model takes the fields the service answers today and keeps any it adds later (``extra``
allowed: ``model_extra`` holds them), so a newer service does not break an older client.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class StoredFact(_Answer):
    """A fact as the service shows it, with the memory it belongs to."""

    tenant_id: str
    user_id: str
    agent_name: str | None = None
    id: str
    content: str
    category: str
    confidence: float
    source_thread_id: str | None = None
    source_error: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class FactChange(_Answer):
    """A fact as a change left it (a removed one as it was), and the memory's new version."""

    fact: StoredFact
    version: int


class FactPage(_Answer):
    """One page of a user's facts; ``next_offset`` is None on the last."""

    facts: list[StoredFact]
    next_offset: int | None = None


class FactEvent(_Answer):
    """One change of a fact: ``event`` is added, updated or removed."""

    version: int
    fact_id: str
    event: str
    category: str | None = None
    confidence: float | None = None
    occurred_at: str | None = None


class EventPage(_Answer):
    """One page of a change log, oldest first; pass ``next`` as ``after`` for the next page
    (None: this was the last)."""

    events: list[FactEvent]
    next: str | None = None


class Context(_Answer):
    """The memory block for the system prompt (``""`` when there is nothing to show) and the
    version of the memory it was rendered from."""

    context: str
    version: int


class Queued(_Answer):
    """What became of a conversation: ``queued`` (else ``reason`` says why not), when it is
    ``due``, ``budget`` when the tenant's LLM budget holds it back, and ``warning`` when the
    service has no memory LLM model (its update waits until one is configured)."""

    queued: bool
    due: str | None = None
    reason: str | None = None
    budget: str | None = None
    warning: str | None = None


class Replaced(_Answer):
    """A memory replaced by a document: the versions before and after, and whether it
    changed (the same document again changes nothing)."""

    version_before: int
    version: int
    changed: bool


class Imported(_Answer):
    """A JSON Lines import: how many memories it named, and how many it changed."""

    memories: int
    changed: int


class Forgotten(_Answer):
    """A user forgotten: the rows deleted, per table."""

    deleted: dict[str, int]


class QueueStatus(_Answer):
    """The tenant's queue: counts by status and its rows (failed first)."""

    counts: dict[str, int]
    updates: list[dict[str, Any]]


class Requeued(_Answer):
    """Updates requeued (by key), and those left alone as they were running."""

    requeued: list[str]
    running: list[str]
