"""Update: what a conversation teaches, applied to a memory.

In: a queued conversation's kept turns and signals, and the memory it belongs to. Out: the
memory saved at its next version (facts added, revised or removed; summaries rewritten), the
thread's watermark moved, and the LLM call's usage recorded.
"""

from __future__ import annotations

from .llm import LLMClient as LLMClient
from .parser import MemoryUpdate as MemoryUpdate
from .parser import parse_update as parse_update
from .updater import MemoryUpdater as MemoryUpdater
from .updater import UpdateResult as UpdateResult
