"""The durable watermark: what part of a thread's conversation the memory has learned from.

One row per (tenant, user, agent, thread) in ``memory_watermarks`` (Alembic revision 0008),
in the queue's database, so every worker and every restart sees it. It names the last message
a successful update learned from: its id when the framework gave it one, else a digest of its
role and text (:func:`message_key`), with its position in the conversation.

:func:`split` cuts a conversation at the watermark: the messages after it are new; the last
exchange before it (at most :data:`CONTEXT_TOKENS` tokens) goes to the prompt as marked,
already-learned context so the LLM can resolve references ("yes, that one"). When the
watermark's message is no longer in the conversation (summarised away, edited), the whole
conversation is new. The service moves the watermark in the transaction of the memory save
(or, when the update changed nothing, on its own right after), never after a failed update.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..intake.messages import Message
from ..storage.watermarks import Mark as Mark
from ..storage.watermarks import has_table as has_table
from ..storage.watermarks import load as load
from ..storage.watermarks import move as move
from ..storage.watermarks import move_on as move_on
from ..tokens import TokenCounter

CONTEXT_TOKENS = 300
"""The budget of the already-learned context sent before the new messages."""


@dataclass(frozen=True)
class Cut:
    """A conversation cut at its watermark. ``new`` is what the LLM has not seen; ``context``
    the last exchange before it; ``whole`` is true when no watermark applied (none stored, or
    its message is gone); ``last`` is the mark to store once ``new`` is learned from (None
    when the conversation has no message); ``previous`` the mark it was cut at, if any."""

    new: tuple[Message, ...]
    context: tuple[Message, ...]
    whole: bool
    last: Mark | None
    previous: Mark | None = None


def message_key(message: Message) -> str:
    """The identity of a message: ``id:<id>`` when it has one, else ``sha256:<digest of role
    and text>`` (64 characters at most either way)."""
    if message.id:
        if len(message.id) <= 61:
            return f"id:{message.id}"
        return "id#" + hashlib.sha256(message.id.encode("utf-8")).hexdigest()[:61]
    digest = hashlib.sha256(f"{message.role}\x00{message.text}".encode()).hexdigest()
    return f"sha256:{digest[:57]}"


def split(conversation: Sequence[Message], mark: Mark | None, counter: TokenCounter) -> Cut:
    """``conversation`` cut at ``mark`` (see the module docstring)."""
    messages = tuple(conversation)
    last = Mark(message_key(messages[-1]), len(messages) - 1) if messages else None
    if mark is None:
        return Cut(messages, (), True, last)
    at = _find(messages, mark)
    if at is None:
        return Cut(messages, (), True, last, mark)
    return Cut(messages[at + 1 :], _context(messages[: at + 1], counter), False, last, mark)


def _find(messages: tuple[Message, ...], mark: Mark) -> int | None:
    if (
        0 <= mark.position < len(messages)
        and message_key(messages[mark.position]) == mark.message_key
    ):
        return mark.position
    for position in range(len(messages) - 1, -1, -1):
        if message_key(messages[position]) == mark.message_key:
            return position
    return None


def _context(before: tuple[Message, ...], counter: TokenCounter) -> tuple[Message, ...]:
    """The last exchange of ``before`` (back to its last user message), newest messages first
    to go into the budget; a message that does not fit whole is left out."""
    kept: list[Message] = []
    used = 0
    for message in reversed(before):
        cost = counter.count(message.text) + 4
        if used + cost > CONTEXT_TOKENS:
            break
        kept.append(message)
        used += cost
        if message.role == "user":
            break
    return tuple(reversed(kept))
