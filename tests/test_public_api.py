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
