"""Ready-made hooks that connect memory_sql to agent frameworks (optional extras)."""

from __future__ import annotations
