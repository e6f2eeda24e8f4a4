"""memory_sql as DeerFlow's pluggable memory backend, and a move of DeerFlow's memory folders.

In DeerFlow's ``config.yaml``::

    memory:
      manager_class: memory_sql.integrations.deerflow:SQLMemoryManager
      backend_config: {url: postgresql+psycopg://memory@db/memory}   # or nothing: SQLite

(keys: :mod:`memory_sql.integrations.deerflow.config`; the backend:
:mod:`memory_sql.integrations.deerflow.manager`; the host's chat model as the memory LLM:
:mod:`memory_sql.integrations.deerflow.llm`; ``memory-sql import --deerflow-dir``:
:mod:`memory_sql.integrations.deerflow.folders`).

DeerFlow is an optional dependency, and not on PyPI: its harness (the ``deerflow`` package)
is installed with DeerFlow itself. It is imported lazily, by
:mod:`~memory_sql.integrations.deerflow.manager` only (``from
deerflow.agents.memory.manager import MemoryManager`` and its error classes: the one import
DeerFlow's contract allows a backend), when ``SQLMemoryManager`` is first asked for. Nothing
else in memory_sql imports DeerFlow: this package, its ``folders`` module and the command line
work without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .manager import SQLMemoryManager

__all__ = ["SQLMemoryManager"]


def __getattr__(name: str) -> Any:
    if name == "SQLMemoryManager":
        try:
            from .manager import SQLMemoryManager
        except ModuleNotFoundError as exc:
            if exc.name is None or not exc.name.startswith("deerflow"):
                raise
            raise ImportError(
                "memory_sql.integrations.deerflow.SQLMemoryManager is a DeerFlow memory "
                "backend: it needs DeerFlow's harness (the deerflow package) importable, as it "
                "is inside DeerFlow's backend"
            ) from exc
        return SQLMemoryManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
