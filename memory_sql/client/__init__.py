"""A typed Python client of the HTTP service (``memory-sql serve``), sync and async, on httpx.

    from memory_sql.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8080", api_key=key) as memory:
        change = memory.add_fact("alice", "Deploys with pnpm", agent_name="coder")
        memory.update_fact("alice", change.fact.id, confidence=0.99, version=change.version)

Error answers raise the library's own exceptions (:mod:`.errors`): a stale ``version`` a
:class:`~memory_sql.VersionConflictError`, a duplicate a
:class:`~memory_sql.DuplicateFactError`, and so on.
"""

from __future__ import annotations

from .clients import AsyncMemoryClient as AsyncMemoryClient
from .clients import MemoryClient as MemoryClient
from .errors import DuplicateFact as DuplicateFact
from .errors import FactNotFound as FactNotFound
from .errors import Forbidden as Forbidden
from .errors import InvalidMemory as InvalidMemory
from .errors import InvalidRequest as InvalidRequest
from .errors import NotFound as NotFound
from .errors import NotKept as NotKept
from .errors import ServiceError as ServiceError
from .errors import StaleVersion as StaleVersion
from .errors import TooLarge as TooLarge
from .errors import Unauthorized as Unauthorized
from .errors import Unavailable as Unavailable
from .errors import Unreachable as Unreachable
from .errors import UpdateNotFound as UpdateNotFound
from .errors import VersionConflict as VersionConflict
from .results import Context as Context
from .results import EventPage as EventPage
from .results import FactChange as FactChange
from .results import FactEvent as FactEvent
from .results import FactPage as FactPage
from .results import Forgotten as Forgotten
from .results import Imported as Imported
from .results import Queued as Queued
from .results import QueueStatus as QueueStatus
from .results import Replaced as Replaced
from .results import Requeued as Requeued
from .results import StoredFact as StoredFact

__all__ = [
    "AsyncMemoryClient",
    "Context",
    "DuplicateFact",
    "EventPage",
    "FactChange",
    "FactEvent",
    "FactNotFound",
    "FactPage",
    "Forbidden",
    "Forgotten",
    "Imported",
    "InvalidMemory",
    "InvalidRequest",
    "MemoryClient",
    "NotFound",
    "NotKept",
    "QueueStatus",
    "Queued",
    "Replaced",
    "Requeued",
    "ServiceError",
    "StaleVersion",
    "StoredFact",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "UpdateNotFound",
    "VersionConflict",
]
