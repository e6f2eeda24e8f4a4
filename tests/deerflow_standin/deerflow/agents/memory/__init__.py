"""Stand-in: ``deerflow.agents.memory`` re-exports the contract, as DeerFlow's does."""

from __future__ import annotations

from .manager import (
    MemoryCallbacks,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryManagerError,
    build_memory_manager,
    resolve_manager_class,
)

__all__ = [
    "MemoryCallbacks",
    "MemoryConflictError",
    "MemoryCorruptionError",
    "MemoryManager",
    "MemoryManagerError",
    "build_memory_manager",
    "resolve_manager_class",
]
