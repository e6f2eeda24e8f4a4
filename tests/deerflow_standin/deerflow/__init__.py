"""A stand-in for DeerFlow's harness package (``deerflow``), for memory_sql's tests only.

DeerFlow's harness is not on PyPI. This package holds just what a pluggable memory backend
meets: ``deerflow.agents.memory.manager`` (the ``MemoryManager`` contract, its error classes
and a factory resolving ``memory.manager_class``) and ``deerflow.models`` (a host default chat
model). It is written from ``shared/reference/deerflow-backend-contract.md``, not copied.
"""

from __future__ import annotations
