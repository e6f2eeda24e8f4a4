"""Recall: a memory rendered for the next conversation.

In: a stored memory and the budgets of the config. Out: the ``<user_memory>`` block for the
system prompt, within the token budget, guaranteed categories first.
"""

from __future__ import annotations

from .injection import format_memory_for_injection as format_memory_for_injection
from .injection import render_memory_block as render_memory_block
