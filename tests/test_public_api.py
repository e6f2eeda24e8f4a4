"""The public API is what memory_sql/__init__.py exports, and every name there resolves."""

from __future__ import annotations

import memory_sql


def test_every_exported_name_exists_and_is_documented():
    for name in memory_sql.__all__:
        obj = getattr(memory_sql, name)
        assert obj.__doc__, f"memory_sql.{name} has no docstring"


def test_every_error_derives_from_the_root():
    errors = [getattr(memory_sql, name) for name in memory_sql.__all__ if name.endswith("Error")]
    assert len(errors) >= 7
    assert all(issubclass(e, memory_sql.MemorySQLError) for e in errors)


def test_the_public_api_is_pinned():
    """What ``memory_sql`` exports; a change here is a change of the public API."""
    assert sorted(memory_sql.__all__) == sorted(
        [
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
    )
    public = {name for name in vars(memory_sql) if not name.startswith("_")}
    assert public - set(memory_sql.__all__) <= {"annotations"} | {
        name for name in public if type(getattr(memory_sql, name)).__name__ == "module"
    }
