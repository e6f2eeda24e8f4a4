"""``memory-sql transfer`` commands (being written)."""

from __future__ import annotations
