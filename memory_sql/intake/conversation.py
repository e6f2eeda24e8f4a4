"""One finished conversation taken in: normalised, filtered and searched for signals, once.

:func:`take_conversation` is the single pass every path of the pipeline goes through (the
service, the HTTP service, the CLI, the DeerFlow and LangChain hooks). What it returns is what
the queue stores and what the updater reads; nothing after intake filters again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..pattern_files import PatternSet, load_patterns
from .filter import filter_messages_for_memory, has_minimum_dialogue
from .messages import Message
from .redact import Redactor
from .signals import Signals, signals_of_kept


@dataclass(frozen=True, slots=True)
class KeptConversation:
    """What leaves intake: the turns worth learning from, in order, and what they signal."""

    turns: list[Message]
    signals: Signals
    redactions: dict[str, int] = field(default_factory=dict)
    """How many secrets of each kind intake replaced in the turns."""

    @property
    def learnable(self) -> bool:
        """Whether the kept turns hold a user turn and an assistant reply (less is not worth
        an update)."""
        return has_minimum_dialogue(self.turns)


def take_conversation(
    messages: Iterable[Any],
    *,
    patterns: PatternSet | None = None,
    redactor: Redactor | None = None,
) -> KeptConversation:
    """``messages`` (any shape :mod:`memory_sql.intake.messages` reads) through the filter
    (:func:`~memory_sql.intake.filter.filter_messages_for_memory`), and the signals of the
    turns it kept.

    Raises:
        InvalidMessageError: ``messages`` is not a list of messages, or one is malformed.
    """
    patterns = patterns or load_patterns()
    redactions: dict[str, int] = {}
    turns = filter_messages_for_memory(
        messages, patterns=patterns, redactor=redactor, redactions=redactions
    )
    return KeptConversation(turns, signals_of_kept(turns, patterns), redactions)
