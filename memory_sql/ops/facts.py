"""Edits of one fact of one memory: add, change, remove, each saved with the memory's version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..errors import (
    DuplicateFactError,
    FactNotFoundError,
)
from ..models import (
    Fact,
    MemoryDocument,
)
from ..scope import Scope
from ..storage import MemoryStorage
from .modify import describe_validation_error, modify


@dataclass(frozen=True)
class FactChange:
    """A fact as a change left it, and the memory's version after the change."""

    fact: Fact
    version: int


def add_fact(
    storage: MemoryStorage,
    content: str,
    *,
    category: str = "context",
    confidence: float = 0.9,
    source_thread_id: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    expected_version: int | None = None,
) -> FactChange:
    """Add one fact to a memory; returns it as built (with its new id) and the version saved.

    Raises:
        DuplicateFactError: the memory has a fact with the same casefold key.
        ValueError: the content, category or confidence is invalid (one line, naming it).
        InvalidScopeError, StorageError, VersionConflictError (see :func:`update_fact`).
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    try:
        fact = Fact(
            content=content,
            category=category,
            confidence=confidence,
            source_thread_id=source_thread_id,
        )
    except ValidationError as exc:
        raise ValueError(f"invalid fact: {describe_validation_error(exc)}") from None

    def change(doc: MemoryDocument) -> None:
        if any(existing.key == fact.key for existing in doc.facts):
            raise DuplicateFactError(str(scope), fact.content)
        doc.facts.append(fact)

    version = modify(storage, scope, change, expected_version)
    return FactChange(_as_stored(storage, scope, fact), version)


def update_fact(
    storage: MemoryStorage,
    fact_id: str,
    *,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    expected_version: int | None = None,
    **changes: Any,
) -> FactChange:
    """Change fields of the fact ``fact_id`` (``content``, ``category``, ``confidence``,
    ``source_thread_id``, ``source_error``); returns the fact as stored and the version saved.

    Without ``expected_version`` a save that loses to another writer is retried on the
    memory as it now is; with it, the memory must still be at that version (else
    :class:`VersionConflictError`, nothing changed).

    Raises:
        FactNotFoundError: the memory has no such fact.
        DuplicateFactError: the new content is another fact's (casefold).
        ValueError: a field is unknown or its value invalid (one line, naming it).
        InvalidScopeError, StorageError, VersionConflictError.
    """
    unknown = set(changes) - _EDITABLE
    if unknown:
        raise ValueError(f"facts have no editable field {', '.join(sorted(unknown))}")
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    changed: list[Fact] = []

    def change(doc: MemoryDocument) -> None:
        for index, existing in enumerate(doc.facts):
            if existing.id == fact_id:
                try:
                    fact = existing.replace(**changes)
                except ValidationError as exc:
                    raise ValueError(f"invalid fact: {describe_validation_error(exc)}") from None
                doc.facts[index] = fact
                changed[:] = [fact]
                return
        raise FactNotFoundError(str(scope), fact_id)

    version = modify(storage, scope, change, expected_version)
    return FactChange(_as_stored(storage, scope, changed[0]), version)


def _as_stored(storage: MemoryStorage, scope: Scope, fact: Fact) -> Fact:
    """``fact`` as its save stored it (with the ``updated_at`` the save gave it): one load,
    from the cache after the save; ``fact`` itself if another writer removed it since."""
    doc = storage.load(**scope.arguments())
    return next((stored for stored in doc.facts if stored.id == fact.id), fact)


_EDITABLE = frozenset({"content", "category", "confidence", "source_thread_id", "source_error"})


def remove_fact(
    storage: MemoryStorage,
    fact_id: str,
    *,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    expected_version: int | None = None,
) -> FactChange:
    """Remove the fact ``fact_id`` from a memory; returns it and the version saved.

    Raises:
        FactNotFoundError: the memory has no such fact.
        InvalidScopeError, StorageError, VersionConflictError (see :func:`update_fact`).
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    removed: list[Fact] = []

    def change(doc: MemoryDocument) -> None:
        kept = [f for f in doc.facts if f.id != fact_id]
        if len(kept) == len(doc.facts):
            raise FactNotFoundError(str(scope), fact_id)
        removed[:] = [f for f in doc.facts if f.id == fact_id]
        doc.facts = kept

    version = modify(storage, scope, change, expected_version)
    return FactChange(removed[0], version)
