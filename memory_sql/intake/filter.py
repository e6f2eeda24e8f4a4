"""Which turns of a finished conversation are worth remembering.

Memory learns from what the user said and what the assistant finally answered, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..pattern_files import PatternList, PatternSet, load_patterns, match_text
from .messages import MAX_MESSAGE_CHARS, Message, normalize_messages, shorten
from .redact import DEFAULT, Redaction, Redactor
from .uploads import strip_upload_blocks

_TRAILING_PUNCTUATION = " \t\r\n.。,，!！?？;；~～"


def filter_messages_for_memory(
    messages: Iterable[Any],
    *,
    patterns: PatternSet | None = None,
    redactor: Redactor | None = None,
    redactions: dict[str, int] | None = None,
) -> list[Message]:
    """The turns of ``messages`` that memory should learn from, as normalised messages.

    Kept: user turns and the assistant's final replies (no tool calls), in order. Dropped:
    tool results, system messages, hidden messages, assistant turns that call tools or have no
    text; upload blocks are cut out of user text, and a user turn left empty by that, or that
    is only a trivial acknowledgement (``patterns.trivial``: "ok", "thanks", "好的", …), is
    dropped together with the assistant reply that answers it. Filtering its own output
    changes nothing.

    A kept turn longer than :data:`~memory_sql.intake.messages.MAX_MESSAGE_CHARS` is cut to its
    head and tail (:func:`~memory_sql.intake.messages.shorten`, what the update prompt shows of
    it anyway) before the trivial check and before any signal is looked for, so the work a turn
    costs is bounded whatever was pasted into it. Upload blocks are removed first, from the whole
    text (a linear scan), since a block's closing tag may lie in the part cut out.

    Every kept turn has its secrets replaced by typed placeholders (``redactor``, default
    :data:`memory_sql.intake.redact.DEFAULT`): nothing after intake (the queue row, the spool,
    the LLM's prompt) sees them. ``redactions``, if given, is added the count of each kind
    replaced.

    ``patterns`` defaults to the bundled ones (:func:`~memory_sql.pattern_files.load_patterns`).

    Raises:
        InvalidMessageError: ``messages`` is not a list of messages, or one is malformed.
    """
    trivial = (patterns or load_patterns()).trivial
    redact = (redactor or DEFAULT).redact
    kept: list[Message] = []
    skip_reply = False
    for message in normalize_messages(messages):
        if message.hidden:
            continue
        if message.role == "user":
            text = _cut(strip_upload_blocks(message.text))
            if not text or is_trivial(text, trivial):
                skip_reply = True
                continue
            skip_reply = False
            text = _redacted(redact(text), redactions)
            kept.append(message if text == message.text else replace(message, text=text))
        elif message.role == "assistant" and not message.has_tool_calls and message.text.strip():
            if skip_reply:
                skip_reply = False
            else:
                text = message.text
                if len(text) > MAX_MESSAGE_CHARS:
                    text = _cut(text.strip())
                text = _redacted(redact(text), redactions)
                kept.append(message if text == message.text else replace(message, text=text))
    return kept


def _redacted(result: Redaction, redactions: dict[str, int] | None) -> str:
    if result.counts and redactions is not None:
        for kind, number in result.counts.items():
            redactions[kind] = redactions.get(kind, 0) + number
    return result.text


def _cut(text: str) -> str:
    return shorten(text) if len(text) > MAX_MESSAGE_CHARS else text


def is_trivial(text: str, trivial: PatternList) -> bool:
    """Whether the whole of ``text``, less trailing punctuation, is one trivial pattern."""
    return trivial.fullmatch(match_text(text).rstrip(_TRAILING_PUNCTUATION))


def has_minimum_dialogue(filtered: Iterable[Message]) -> bool:
    """Whether ``filtered`` (the output of :func:`filter_messages_for_memory`) holds at least
    one user turn and one assistant reply: less than that is not worth an update.
    """
    roles = {message.role for message in filtered}
    return "user" in roles and "assistant" in roles
