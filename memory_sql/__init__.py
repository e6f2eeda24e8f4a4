"""memory_sql: long-term memory for LLM agents, stored in PostgreSQL or SQLite.

The public API is exactly what this module exports; every other module is private.
"""

from __future__ import annotations

from .config import MemoryConfig as MemoryConfig
from .errors import ConfigError as ConfigError
from .errors import DuplicateFactError as DuplicateFactError
from .errors import FactNotFoundError as FactNotFoundError
from .errors import ImportFileError as ImportFileError
from .errors import InvalidMessageError as InvalidMessageError
from .errors import InvalidScopeError as InvalidScopeError
from .errors import InvalidUpdateError as InvalidUpdateError
from .errors import LLMError as LLMError
from .errors import MemorySQLError as MemorySQLError
from .errors import SchemaOutOfDateError as SchemaOutOfDateError
from .errors import SpoolFullError as SpoolFullError
from .errors import StorageError as StorageError
from .errors import UpdateNotFoundError as UpdateNotFoundError
from .errors import VersionConflictError as VersionConflictError
from .intake.filter import filter_messages_for_memory as filter_messages_for_memory
from .intake.filter import has_minimum_dialogue as has_minimum_dialogue

# Every storage's saves go through the redactor and the instruction rule unless given its own.
from .intake.guard import DEFAULT_GUARD as _DEFAULT_GUARD
from .intake.messages import Message as Message
from .intake.messages import normalize_messages as normalize_messages
from .intake.signals import Signals as Signals
from .intake.signals import detect_correction as detect_correction
from .intake.signals import detect_reinforcement as detect_reinforcement
from .intake.signals import detect_signals as detect_signals
from .intake.uploads import strip_upload_mentions as strip_upload_mentions
from .migrations import upgrade as upgrade
from .models import Fact as Fact
from .models import History as History
from .models import MemoryDocument as MemoryDocument
from .models import Section as Section
from .models import UserContext as UserContext
from .models import fact_key as fact_key
from .queue import QueueChange as QueueChange
from .queue import QueuedUpdate as QueuedUpdate
from .queue import UpdateKey as UpdateKey
from .recall.injection import format_memory_for_injection as format_memory_for_injection
from .recall.injection import render_memory_block as render_memory_block
from .scope import Scope as Scope
from .service import MemoryService as MemoryService
from .storage import MemoryStorage as MemoryStorage
from .storage import open_storage as open_storage
from .tokens import TokenCounter as TokenCounter
from .tokens import make_token_counter as make_token_counter
from .update.llm import LLMClient as LLMClient
from .update.parser import MemoryUpdate as MemoryUpdate
from .update.parser import parse_update as parse_update
from .update.updater import MemoryUpdater as MemoryUpdater
from .update.updater import UpdateResult as UpdateResult

MemoryStorage.default_write_guard = _DEFAULT_GUARD

__all__ = [
    "ConfigError",
    "DuplicateFactError",
    "FactNotFoundError",
    "Fact",
    "History",
    "ImportFileError",
    "InvalidMessageError",
    "InvalidScopeError",
    "InvalidUpdateError",
    "LLMClient",
    "LLMError",
    "MemoryConfig",
    "MemoryDocument",
    "MemoryService",
    "MemorySQLError",
    "MemoryStorage",
    "MemoryUpdate",
    "MemoryUpdater",
    "Message",
    "QueueChange",
    "QueuedUpdate",
    "SchemaOutOfDateError",
    "Scope",
    "Section",
    "Signals",
    "SpoolFullError",
    "StorageError",
    "TokenCounter",
    "UpdateKey",
    "UpdateNotFoundError",
    "UpdateResult",
    "UserContext",
    "VersionConflictError",
    "detect_correction",
    "detect_reinforcement",
    "detect_signals",
    "fact_key",
    "filter_messages_for_memory",
    "format_memory_for_injection",
    "has_minimum_dialogue",
    "make_token_counter",
    "normalize_messages",
    "open_storage",
    "parse_update",
    "render_memory_block",
    "strip_upload_mentions",
    "upgrade",
]
