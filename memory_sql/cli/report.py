"""``memory-sql report`` commands (being written)."""

from __future__ import annotations
