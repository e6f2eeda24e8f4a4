"""memory_sql: long-term memory for LLM agents, stored in PostgreSQL or SQLite."""

from __future__ import annotations

from .errors import DuplicateFactError as DuplicateFactError
from .errors import InvalidScopeError as InvalidScopeError
from .errors import MemorySQLError as MemorySQLError
from .errors import SchemaOutOfDateError as SchemaOutOfDateError
from .errors import StorageError as StorageError
from .errors import VersionConflictError as VersionConflictError
from .models import Fact as Fact
from .models import History as History
from .models import MemoryDocument as MemoryDocument
from .models import Section as Section
from .models import UserContext as UserContext
from .models import fact_key as fact_key
from .scope import Scope as Scope

__all__ = [
    "DuplicateFactError",
    "Fact",
    "History",
    "InvalidScopeError",
    "MemoryDocument",
    "MemorySQLError",
    "SchemaOutOfDateError",
    "Scope",
    "Section",
    "StorageError",
    "UserContext",
    "VersionConflictError",
    "fact_key",
]
