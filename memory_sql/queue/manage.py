"""A way back for updates that failed: list the queue's rows, retry them, drop them.

A row of ``memory_pending_updates`` is named by its key, written as text::

    [KIND:]TENANT/USER/AGENT/THREAD

``AGENT`` is ``-`` for the memory of unnamed agents (as :class:`~memory_sql.Scope` prints it),
``KIND`` is ``turn`` (after a conversation) or ``flush`` (before summarization); without it a
key names both kinds of the thread. Parts may be left off from the right: ``TENANT/USER`` names
every row of that user, ``TENANT/USER/AGENT`` every row of that memory. The thread is the rest
of the text, slashes included (tenant, user and agent names cannot hold ``/`` or ``:``, so this
reads one way only): ``default/alice/coder/chat.jsonl:3`` is thread ``chat.jsonl:3``.
:func:`list_updates` shows keys in this form, kind included, ready to copy.

:func:`retry_updates` makes rows run again: status ``pending``, ``attempts`` 0, no last error,
due now (a parsed reply kept by a run that lost to version conflicts stays). :func:`drop_updates`
deletes rows: their conversations are not learned from. Both leave alone a row a worker is
running (under an unexpired lease) and report it, since its run ends by completing, retrying or
failing that row itself. Each call is one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from ..errors import UpdateNotFoundError
from ..models import format_timestamp, utcnow
from ..scope import Scope, check_thread_id
from ..storage import queue_rows
from ..storage.queue_rows import KeyPattern

KINDS = ("turn", "flush")
KEY_SYNTAX = "[KIND:]TENANT/USER[/AGENT[/THREAD]] (KIND turn or flush; AGENT - for none)"


@dataclass(frozen=True)
class UpdateKey:
    """Which queue rows a key names: ``None`` parts match any value."""

    tenant_id: str
    user_id: str
    agent_name: str | None = None  # None: any agent; "" the unnamed agents'
    thread_id: str | None = None
    kind: str | None = None

    @classmethod
    def parse(cls, text: str) -> UpdateKey:
        """The key ``text`` names (see the module docstring).

        Raises:
            ValueError: ``text`` is not a key; the message shows the syntax.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"an update key cannot be empty: expected {KEY_SYNTAX}")
        kind = None
        body = text
        prefix, colon, rest = text.partition(":")
        if colon and "/" not in prefix:
            if prefix not in KINDS:
                raise ValueError(
                    f"update key {text!r}: kind {prefix!r} is not turn or flush; "
                    f"expected {KEY_SYNTAX}"
                )
            kind, body = prefix, rest
        parts = body.split("/", 3)
        if len(parts) < 2 or any(not part for part in parts):
            raise ValueError(f"update key {text!r}: expected {KEY_SYNTAX}")
        tenant, user = parts[0], parts[1]
        agent = parts[2] if len(parts) > 2 else None
        thread = parts[3] if len(parts) > 3 else None
        try:
            scope = Scope.of(
                tenant_id=tenant, user_id=user, agent_name=None if agent in (None, "-") else agent
            )
            if thread is not None:
                check_thread_id(thread)
        except ValueError as exc:
            raise ValueError(f"update key {text!r}: {exc}") from None
        agent_name = None if agent is None else scope.agent_key
        return cls(scope.tenant_id, scope.user_id, agent_name, thread, kind)

    @classmethod
    def of(cls, key: str | UpdateKey) -> UpdateKey:
        return key if isinstance(key, UpdateKey) else cls.parse(key)

    def __str__(self) -> str:
        parts = [self.tenant_id, self.user_id]
        if self.agent_name is not None:
            parts.append(self.agent_name or "-")
            if self.thread_id is not None:
                parts.append(self.thread_id)
        return (f"{self.kind}:" if self.kind else "") + "/".join(parts)

    def pattern(self) -> KeyPattern:
        """The rows this key names, as :mod:`memory_sql.storage.queue_rows` selects them."""
        return (self.tenant_id, self.user_id, self.agent_name, self.thread_id, self.kind)


@dataclass(frozen=True)
class QueuedUpdate:
    """One row of the queue, as :func:`list_updates` shows it."""

    tenant_id: str
    user_id: str
    agent_name: str | None
    thread_id: str
    kind: str
    status: str  # "pending" (waiting or running) or "failed" (given up)
    attempts: int
    last_error: str | None
    due_at: datetime
    first_enqueued_at: datetime
    last_enqueued_at: datetime
    running: bool  # leased to a worker now

    @property
    def key(self) -> str:
        """The row's full key, as :meth:`UpdateKey.parse` reads it."""
        return str(
            UpdateKey(
                self.tenant_id, self.user_id, self.agent_name or "", self.thread_id, self.kind
            )
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, timestamps as DeerFlow writes them."""
        return {
            "key": self.key,
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "agent_name": self.agent_name,
            "thread_id": self.thread_id,
            "kind": self.kind,
            "status": "running" if self.running else self.status,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "due_at": format_timestamp(self.due_at),
            "first_enqueued_at": format_timestamp(self.first_enqueued_at),
            "last_enqueued_at": format_timestamp(self.last_enqueued_at),
        }


@dataclass(frozen=True)
class QueueChange:
    """What :func:`retry_updates` or :func:`drop_updates` did: the keys of the rows changed,
    and of those left alone because a worker is running them."""

    changed: tuple[str, ...]
    running: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.changed)


def list_updates(
    engine: Engine,
    *,
    failed_only: bool = False,
    tenant_id: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    limit: int | None = None,
    now: datetime | None = None,
) -> list[QueuedUpdate]:
    """The queue's rows, failed first, then by due time; only ``failed`` ones if
    ``failed_only``; only those of the tenant, user or agent given (``agent_name=""``: the
    unnamed agents'); at most ``limit``.

    Raises:
        InvalidScopeError: a tenant, user or agent filter is malformed.
        ValueError: ``limit`` below 1.
        StorageError: the database failed.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    checked = Scope.of(user_id=user_id, agent_name=agent_name or None, tenant_id=tenant_id)
    now = now or utcnow()
    rows = queue_rows.list_rows(
        engine,
        failed_only=failed_only,
        tenant_id=None if tenant_id is None else checked.tenant_id,
        user_id=None if user_id is None else checked.user_id,
        agent_key=None if agent_name is None else checked.agent_key,
        limit=limit,
    )
    return [_queued(row, now) for row in rows]


def count_updates(engine: Engine, *, tenant_id: str | None = None) -> dict[str, int]:
    """:meth:`UpdateQueue.counts <memory_sql.queue.UpdateQueue.counts>` of ``tenant_id``'s rows
    (None: of every tenant), on a connection of the caller's (row-level security applies)."""
    tenant = None if tenant_id is None else Scope.of(tenant_id=tenant_id).tenant_id
    return queue_rows.count_rows(engine, utcnow(), tenant_id=tenant)


def retry_updates(
    engine: Engine,
    keys: Iterable[str | UpdateKey] | None = None,
    *,
    tenant_id: str | None = None,
    now: datetime | None = None,
) -> QueueChange:
    """Make the rows ``keys`` name — every ``failed`` row (of ``tenant_id``, if given) if
    ``keys`` is None — run again:
    ``pending``, ``attempts`` 0, no last error, due now. A row that is waiting (say, for its
    back-off after a failed attempt) is made due now the same way.

    Raises:
        ValueError: a key is malformed.
        UpdateNotFoundError: a key names no row (nothing was changed).
        StorageError: the database failed.
    """
    now = now or utcnow()
    values = {
        "status": "pending",
        "attempts": 0,
        "last_error": None,
        "due_at": now,
        "lease_owner": None,
        "lease_until": None,
    }
    return _change(engine, keys, tenant_id, now, "retrying updates", values)


def drop_updates(
    engine: Engine,
    keys: Iterable[str | UpdateKey] | None = None,
    *,
    tenant_id: str | None = None,
    now: datetime | None = None,
) -> QueueChange:
    """Delete the rows ``keys`` name — every ``failed`` row (of ``tenant_id``, if given) if
    ``keys`` is None. Their conversations are not learned from.

    Raises:
        ValueError: a key is malformed.
        UpdateNotFoundError: a key names no row (nothing was deleted).
        StorageError: the database failed.
    """
    now = now or utcnow()
    return _change(engine, keys, tenant_id, now, "dropping updates", None)


def _change(
    engine: Engine,
    keys: Iterable[str | UpdateKey] | None,
    tenant_id: str | None,
    now: datetime,
    what: str,
    values: dict[str, Any] | None,
) -> QueueChange:
    """Retry (to ``values``) or drop (``values`` None) the rows ``keys`` name."""
    tenant = None if tenant_id is None else Scope.of(tenant_id=tenant_id).tenant_id
    parsed: Sequence[UpdateKey] | None = None
    if keys is not None:
        parsed = [UpdateKey.of(key) for key in keys]
        if not parsed:
            raise ValueError(f"name the updates: one or more keys {KEY_SYNTAX}")

    def every_key_found(rows: list[Any]) -> None:
        queued = [_queued(row, now) for row in rows]
        for key in parsed or ():
            if not any(_matches(key, row) for row in queued):
                raise UpdateNotFoundError(str(key))

    rows = queue_rows.change_rows(
        engine,
        None if parsed is None else [key.pattern() for key in parsed],
        tenant_id=tenant,
        now=now,
        what=what,
        drop=values is None,
        values=values,
        check=every_key_found,
    )
    queued = [_queued(row, now) for row in rows]
    return QueueChange(
        changed=tuple(row.key for row in queued if not row.running),
        running=tuple(row.key for row in queued if row.running),
    )


def _matches(key: UpdateKey, row: QueuedUpdate) -> bool:
    return (
        key.tenant_id == row.tenant_id
        and key.user_id == row.user_id
        and key.agent_name in (None, row.agent_name or "")
        and key.thread_id in (None, row.thread_id)
        and key.kind in (None, row.kind)
    )


def _queued(row: Any, now: datetime) -> QueuedUpdate:
    return QueuedUpdate(
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        agent_name=row.agent_name or None,
        thread_id=row.thread_id,
        kind=row.kind,
        status=row.status,
        attempts=row.attempts,
        last_error=row.last_error,
        due_at=row.due_at,
        first_enqueued_at=row.first_enqueued_at,
        last_enqueued_at=row.last_enqueued_at,
        running=row.lease_until is not None and row.lease_until >= now,
    )
