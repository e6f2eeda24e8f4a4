"""What a storage backend can do beyond the core contract of :class:`~.base.MemoryStorage`.

The core contract (load, save at a version, match facts, access heat) is every backend's. The
rest of memory_sql also needs, from the storage it runs on:

========================  ===================================================  ====  =====
capability                what it is (who needs it)                            SQL   files
========================  ===================================================  ====  =====
``transactional_save``    a save whose transaction also carries the caller's   yes   no
                          writes (``save(in_transaction=…)``: the update run
                          completes its queue row and records its LLM call
                          with the save it made)
``indexed_search``        ranked recall through a full-text index              yes   no (BM25
                          (:mod:`.search`, :mod:`.dialects`)                              in Python)
``history``               past versions: ``load(as_of=…)``, the change log,    yes   no
                          ``purge_closed`` (ops.history, MCP's history tool)
``queue``                 the durable update queue (:mod:`memory_sql.queue`),  yes   no
                          its claim (``FOR UPDATE SKIP LOCKED``), the CLI's
                          and the console's queue commands
``llm_budgets``           LLM usage and budget holds (:mod:`.budgets`)          yes   no
``watermarks``            how far each thread was read (:mod:`.watermarks`)     yes   no
``operations``            the cross-memory operations of :mod:`memory_sql.ops`  yes   no
                          (search, forget, export/import, reports, users),
                          MCP and the HTTP service
========================  ===================================================  ====  =====

A backend lists what it has in ``capabilities``; code that needs one asks :func:`require`,
which returns the storage's SQL engine (the handle the capability's ``storage`` module takes)
or raises :class:`~memory_sql.errors.CapabilityMissingError` naming what is missing. Nothing
outside ``storage/`` tests the backend's class. The operations of :mod:`memory_sql.ops` take
a storage and ask :func:`engine_for` (an engine is taken as it is, for callers holding one).
"""

from __future__ import annotations

from collections.abc import Set
from enum import Enum
from typing import Protocol

from sqlalchemy.engine import Engine

from ..errors import CapabilityMissingError


class Capability(str, Enum):
    TRANSACTIONAL_SAVE = "transactional_save"
    INDEXED_SEARCH = "indexed_search"
    HISTORY = "history"
    QUEUE = "queue"
    LLM_BUDGETS = "llm_budgets"
    WATERMARKS = "watermarks"
    OPERATIONS = "operations"


SQL_CAPABILITIES = frozenset(Capability)
"""A SQL database has them all."""


class MemoryStorage(Protocol):
    """What this module reads of a :class:`~memory_sql.storage.base.MemoryStorage`."""

    @property
    def capabilities(self) -> Set[Capability]: ...


def has(storage: MemoryStorage, capability: Capability) -> bool:
    """Whether ``storage`` has ``capability``."""
    return capability in storage.capabilities


def require(
    storage: MemoryStorage, capability: Capability, *, needed_by: str | None = None
) -> Engine:
    """The SQL engine behind ``storage``'s ``capability`` (what the capability's functions in
    ``storage/`` take).

    Raises:
        CapabilityMissingError: ``storage`` lacks ``capability`` (``needed_by`` says who
            asked).
    """
    engine: Engine | None = getattr(storage, "engine", None)
    if capability not in storage.capabilities or engine is None:
        raise CapabilityMissingError(capability.value, type(storage).__name__, needed_by)
    return engine


def engine_for(
    storage: MemoryStorage | Engine,
    capability: Capability = Capability.OPERATIONS,
    *,
    needed_by: str | None = None,
) -> Engine:
    """The SQL engine behind ``storage``'s ``capability`` (:func:`require`); an engine as it
    is.

    Raises:
        CapabilityMissingError: ``storage`` lacks ``capability``.
    """
    if isinstance(storage, Engine):
        return storage
    return require(storage, capability, needed_by=needed_by)


def sql_engine(storage: MemoryStorage) -> Engine | None:
    """``storage``'s SQL engine, None for a backend without one (the queue then runs on an
    engine of its own)."""
    return getattr(storage, "engine", None) if has(storage, Capability.QUEUE) else None
