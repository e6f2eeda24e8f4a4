"""Correction and reinforcement signals in what the user said.

A correction ("that's wrong", "不对") tells the updater to revise or remove old facts more
readily; a reinforcement ("yes, exactly", "完全正确") tells it to keep them. Both are searched in
the last :data:`SIGNAL_WINDOW` user turns that intake keeps
(:func:`~memory_sql.intake.filter.filter_messages_for_memory`: so tool output, upload blocks and
acknowledgements never trigger one); a reinforcement is not reported when a correction is found.
The patterns come from pattern files (:mod:`memory_sql.pattern_files`).

The public detectors accept raw messages (any shape :mod:`memory_sql.intake.messages` reads)
or normalised ones, filtered or not, filter them, and raise
:class:`~memory_sql.errors.InvalidMessageError` for a malformed one. The pipeline itself calls
:func:`signals_of_kept` on the turns intake has already kept
(:func:`~memory_sql.intake.conversation.take_conversation`), so a conversation is filtered once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..pattern_files import PatternSet, load_patterns, match_text
from .filter import filter_messages_for_memory
from .messages import Message

SIGNAL_WINDOW = 6


@dataclass(frozen=True, slots=True)
class Signals:
    """What the user's recent turns signal. ``reinforcement`` is never true with ``correction``."""

    correction: bool = False
    reinforcement: bool = False

    def __or__(self, other: Signals) -> Signals:
        """Both conversations' signals (a queue merging two conversations of one key): either
        correction counts, and a reinforcement only when neither has a correction."""
        correction = self.correction or other.correction
        return Signals(correction, not correction and (self.reinforcement or other.reinforcement))


def detect_signals(messages: Iterable[Any], *, patterns: PatternSet | None = None) -> Signals:
    """Correction and reinforcement of one conversation at once (see the module docstring)."""
    patterns = patterns or load_patterns()
    return signals_of_kept(filter_messages_for_memory(messages, patterns=patterns), patterns)


def signals_of_kept(kept: Sequence[Message], patterns: PatternSet) -> Signals:
    """:func:`detect_signals` of turns the filter has already kept (not filtered again)."""
    texts = _window(kept)
    if any(patterns.correction.search(text) for text in texts):
        return Signals(correction=True)
    return Signals(reinforcement=any(patterns.reinforcement.search(text) for text in texts))


def detect_correction(messages: Iterable[Any], *, patterns: PatternSet | None = None) -> bool:
    """Whether the user corrected the assistant in the recent turns."""
    patterns = patterns or load_patterns()
    kept = filter_messages_for_memory(messages, patterns=patterns)
    return any(patterns.correction.search(text) for text in _window(kept))


def detect_reinforcement(messages: Iterable[Any], *, patterns: PatternSet | None = None) -> bool:
    """Whether the user confirmed the assistant in the recent turns, without correcting it."""
    return detect_signals(messages, patterns=patterns).reinforcement


def _window(kept: Sequence[Message]) -> list[str]:
    return [match_text(m.text) for m in kept if m.role == "user"][-SIGNAL_WINDOW:]
