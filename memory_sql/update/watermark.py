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

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from ..intake.messages import Message
from ..models import utcnow
from ..schema import memory_watermarks
from ..scope import Scope
from ..storage.driver import DriverConnection, DriverFallback, compiled_for_driver, unobserved
from ..tokens import TokenCounter

CONTEXT_TOKENS = 300
"""The budget of the already-learned context sent before the new messages."""


@dataclass(frozen=True)
class Mark:
    """A stored watermark: the key of the last message learned from, and its position."""

    message_key: str
    position: int


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


def has_table(engine: Engine) -> bool:
    """Whether the database has the watermark table (revision 0008 or later)."""
    return sa.inspect(engine).has_table(memory_watermarks.name)


_w = memory_watermarks.c
_KEY_COLUMNS = ("tenant_id", "user_id", "agent_name", "thread_id")
_LOAD = sa.select(_w.message_key, _w.position).where(
    *(_w[name] == sa.bindparam(f"key_{name}") for name in _KEY_COLUMNS)
)


def load(engine: Engine, scope: Scope, thread_id: str) -> Mark | None:
    """The stored watermark of a thread, if any (one autocommit round trip on the driver
    where it can, else SQLAlchemy's)."""
    parameters = _key(scope, thread_id)
    if unobserved(engine):
        sql, _ = compiled_for_driver(_LOAD, engine.dialect)
        try:
            with DriverConnection(engine) as dbapi:
                rows = dbapi.execute(sql, parameters).fetchall()
            return Mark(*rows[0]) if rows else None
        except DriverFallback:
            pass  # SQLAlchemy's path reads it, and reports what fails
    with engine.connect() as conn:
        row = conn.execute(_LOAD, parameters).first()
    return Mark(row.message_key, row.position) if row is not None else None


def move_on(conn: Connection, scope: Scope, thread_id: str, mark: Mark) -> None:
    """Store ``mark`` as the thread's watermark, on ``conn`` (in the caller's transaction)."""
    values = {"message_key": mark.message_key, "position": mark.position, "updated_at": utcnow()}
    conn.execute(_upsert(conn.dialect.name), {**_key(scope, thread_id), **values})


def move(engine: Engine, scope: Scope, thread_id: str, mark: Mark) -> None:
    """:func:`move_on` in a transaction of its own."""
    with engine.begin() as conn:
        move_on(conn, scope, thread_id, mark)


def _key(scope: Scope, thread_id: str) -> dict[str, Any]:
    return {
        "key_tenant_id": scope.tenant_id,
        "key_user_id": scope.user_id,
        "key_agent_name": scope.agent_name or "",
        "key_thread_id": thread_id,
    }


@functools.cache
def _upsert(dialect: str) -> Any:
    """The thread's row inserted, or its mark moved when it has one: one statement."""
    insert = (postgresql if dialect == "postgresql" else sqlite).insert(memory_watermarks)
    insert = insert.values(
        **{name: sa.bindparam(f"key_{name}") for name in _KEY_COLUMNS},
        message_key=sa.bindparam("message_key"),
        position=sa.bindparam("position"),
        updated_at=sa.bindparam("updated_at"),
    )
    return insert.on_conflict_do_update(
        index_elements=[_w[name] for name in _KEY_COLUMNS],
        set_={
            "message_key": insert.excluded.message_key,
            "position": insert.excluded.position,
            "updated_at": insert.excluded.updated_at,
        },
    )
