"""The durable, debounced queue of conversations waiting for a memory update.

One row per key (tenant, user, agent, thread, kind) in ``memory_pending_updates``. A new
conversation for a key replaces the older one waiting there and OR-merges its signals; the key
becomes due ``debounce_seconds`` after its latest conversation, but never later than
``max_debounce_seconds`` after the first one still waiting, so a busy thread is still updated.
``kind`` keeps apart the two ways in: ``turn`` (after each conversation, debounced) and
``flush`` (before summarization drops messages, due at once), so a later turn cannot replace
messages that are about to be summarised away before they were read. Flushes of one thread
accumulate rather than replace each other, since each holds messages the next one lacks.

Workers in any number of processes :meth:`~UpdateQueue.claim` due rows with a lease (``FOR
UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's single writer elsewhere), so no row is processed
by two workers at once; a lease left by a dead process expires and the row is claimed again.
Updates of one memory (tenant, user, agent) run one at a time: a claim never hands out a row
whose memory has another row under an unexpired lease (on PostgreSQL a transaction-scoped
advisory lock per memory makes concurrent claims agree), so threads of one busy user do not
race each other to version conflicts.
Each enqueue moves the row's ``generation`` forward: a conversation that arrives while its key
is being processed makes :meth:`~UpdateQueue.complete` keep the row for the next run instead of
deleting it. A failed run is retried after an exponential back-off; after ``max_attempts`` runs
the row stays, ``failed``, with its last error, until a new conversation for the key arrives.
A run that lost to version conflicts is postponed (:meth:`~UpdateQueue.postpone`) with its parsed
reply, its attempt not counted, so the next run applies that reply without asking the LLM again.

When the memory lives in the queue's database, :meth:`~UpdateQueue.complete_on` completes a
row inside the memory save's own transaction: the save and the completion commit together or
not at all, so a process killed at any point never applies one conversation twice.

What one row may cost is bounded: a row holds at most ``max_row_messages`` messages and
``max_row_bytes`` bytes of them (as JSON); flushes that would grow it past either, or one
conversation over them, are cut oldest first, and the cut messages are counted
(:attr:`UpdateQueue.trimmed_messages`) and logged. Cutting rather than refusing keeps every
conversation that was acknowledged, spooled ones included, in the queue: its newest part.

Every method is retried once when it meets a connection that died (a restarted server, see
:func:`~memory_sql.database.reconnecting`); each is safe to repeat.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection, Engine

from ..config import QueueSettings
from ..database import database_errors, reconnecting
from ..errors import LeaseLostError, StorageError
from ..intake.messages import Message
from ..intake.signals import Signals
from ..models import utcnow
from ..scope import Scope
from ..storage import watermarks
from ..storage.base import Seen
from ..storage.dialects import dialect_of
from ..storage.queue_rows import QueueRows
from ..storage.watermarks import Mark
from ..storage.with_save import WithTheSave
from ..tenancy import ALL_TENANTS, acting_for

logger = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 3600.0
# The first key of PostgreSQL's two-key advisory locks taken by claims ("ms" for memory_sql).
_ADVISORY_LOCK_CLASS = 0x6D73


@dataclass(frozen=True)
class PendingUpdate:
    """A claimed row: what the worker runs the updater on."""

    scope: Scope
    thread_id: str
    kind: str
    messages: tuple[Message, ...]
    signals: Signals
    generation: int
    attempts: int
    reply: str | None = None
    """A parsed LLM reply (JSON) left by a run that lost to version conflicts."""
    mark: Mark | None = None
    """The thread's watermark, read with the claim (when ``mark_read``)."""
    mark_read: bool = False
    """Whether the claim read the watermark (the queue's database has the table): then
    ``mark`` is it, and the run need not read it again."""
    memory: Seen | None = None
    """The memory's stamp as the claim read it (None: not read)."""


_SKIPPED: Any = object()
"""In :meth:`UpdateQueue._lease`'s answer: a row left out, its memory leased elsewhere."""


@dataclass(frozen=True)
class Enqueued:
    """One conversation for :meth:`UpdateQueue.add_many`: what :meth:`UpdateQueue.add` takes."""

    scope: Scope
    thread_id: str
    messages: Sequence[Message]
    signals: Signals
    immediate: bool = False


def make_owner() -> str:
    """A name for this process's leases: host, pid and a random part."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class UpdateQueue:
    """The pending-updates table of one database (see the module docstring).

    Every method is one short transaction and safe to call from many threads and processes.
    Database failures raise :class:`~memory_sql.StorageError`.
    """

    def __init__(
        self,
        engine: Engine,
        settings: QueueSettings | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        settings = settings if settings is not None else QueueSettings()
        self.engine = engine
        self.debounce = timedelta(seconds=settings.debounce_seconds)
        self.max_wait = timedelta(seconds=settings.max_debounce_seconds)
        self.lease = timedelta(seconds=settings.lease_seconds)
        self.max_attempts = settings.max_attempts
        self.backoff_seconds = settings.retry_backoff_seconds
        self.owner = owner or make_owner()
        self.max_row_messages = settings.max_row_messages
        self.max_row_bytes = settings.max_row_bytes
        self.trimmed_messages = 0
        """Messages cut from rows over the caps since start (oldest first)."""
        self._trim_lock = threading.Lock()
        self._dialect = dialect_of(engine)
        self._rows = QueueRows(self._dialect)
        self._with_marks: bool | None = None
        """Whether claims read the rows' watermarks (None: not looked yet)."""

    # enqueue ---------------------------------------------------------------------------------

    @reconnecting
    def add(
        self,
        scope: Scope,
        thread_id: str,
        messages: Sequence[Message],
        signals: Signals,
        *,
        immediate: bool = False,
        now: datetime | None = None,
    ) -> datetime:
        """Queue ``messages`` (filtered) as the key's latest conversation; returns when it is due.

        ``immediate`` is the summarization flush: kind ``flush``, due now.
        """
        now = now or utcnow()
        with self._transaction() as conn:
            return self._add_on(conn, Enqueued(scope, thread_id, messages, signals, immediate), now)

    @reconnecting
    def add_many(self, items: Sequence[Enqueued], *, now: datetime | None = None) -> list[datetime]:
        """:meth:`add` of every item, in one transaction: all are queued or none. Items of one
        key are applied in the order given (a later turn replaces an earlier one, flushes
        accumulate), exactly as the same :meth:`add` calls one by one would; returns each
        item's due time.

        The first item of each key is inserted by multi-row statements; the keys
        that had a row already, and the later items of a key, are merged one by one as
        :meth:`add` merges. Keys are written in a fixed order, so two batches of overlapping
        keys wait for each other rather than deadlock."""
        now = now or utcnow()
        order = sorted(range(len(items)), key=lambda i: _sort_key(items[i]))
        dues: list[datetime] = [now] * len(items)
        firsts: dict[tuple[Any, ...], int] = {}
        for index in order:
            firsts.setdefault(_sort_key(items[index]), index)
        with self._transaction() as conn:
            inserted = self._insert_new(conn, [items[i] for i in firsts.values()], now)
            for index in order:
                item = items[index]
                if firsts[_sort_key(item)] == index and _sort_key(item) in inserted:
                    dues[index] = now if item.immediate else now + self.debounce
                else:
                    dues[index] = self._add_on(conn, item, now)
        return dues

    def _insert_new(
        self, conn: Connection, items: Sequence[Enqueued], now: datetime
    ) -> set[tuple[Any, ...]]:
        """Insert a row for each of ``items`` (one per key) whose key has none; the keys
        inserted."""
        if not items:
            return set()
        rows = [
            {
                **_key_values(item.scope, item.thread_id, _kind(item)),
                "messages": self._capped(
                    [m.to_dict() for m in item.messages], item.scope, item.thread_id
                ),
                "correction": item.signals.correction,
                "reinforcement": item.signals.reinforcement,
                "first_enqueued_at": now,
                "last_enqueued_at": now,
                "due_at": now if item.immediate else now + self.debounce,
                "generation": 1,
                "attempts": 0,
                "status": "pending",
            }
            for item in items
        ]
        # Many parameter sets with RETURNING: SQLAlchemy's "insertmanyvalues" sends them as
        # multi-row INSERTs of one compiled statement.
        returned = conn.execute(self._rows.insert_new(), rows).all()
        return {
            (tenant, user, agent, thread, kind == "flush")
            for tenant, user, agent, thread, kind in returned
        }

    def _add_on(self, conn: Connection, item: Enqueued, now: datetime) -> datetime:
        scope, thread_id, signals, immediate = (
            item.scope,
            item.thread_id,
            item.signals,
            item.immediate,
        )
        kind = "flush" if immediate else "turn"
        key = _key_values(scope, thread_id, kind)
        body = self._capped([m.to_dict() for m in item.messages], scope, thread_id)
        due = now if immediate else now + self.debounce
        # On PostgreSQL the row may vanish between the two statements (a run completing):
        # then the insert is tried again.
        bound_key = {f"key_{name}": value for name, value in key.items()}
        for _ in range(3):
            inserted = conn.execute(
                self._rows.insert_one,
                {
                    **key,
                    "messages": body,
                    "correction": signals.correction,
                    "reinforcement": signals.reinforcement,
                    "first_enqueued_at": now,
                    "last_enqueued_at": now,
                    "due_at": due,
                    "generation": 1,
                    "attempts": 0,
                    "status": "pending",
                },
            ).first()
            if inserted is not None:
                return due
            row = conn.execute(self._rows.select_for_add, bound_key).first()
            if row is not None:
                break
        else:
            raise StorageError(
                f"update queue: the row of {scope}, thread {thread_id} "
                "kept vanishing while being written"
            )
        merged = Signals(row.correction, row.reinforcement) | signals
        if immediate and not _leased(row.lease_until, now):
            # Flushes accumulate: each holds messages a summarization removed, which the
            # next flush of the thread no longer contains. The same flush twice (an add
            # run again after its commit was lost with the connection) is kept once.
            waiting, adding = json.loads(row.messages), json.loads(body)
            if waiting[-len(adding) :] != adding:
                body = self._capped(waiting + adding, scope, thread_id)
            else:
                body = row.messages
        first = now if row.status == "failed" else row.first_enqueued_at
        if not immediate:
            due = min(due, first + self.max_wait)
        conn.execute(
            self._rows.merge,
            {
                **bound_key,
                "new_messages": body,
                "new_correction": merged.correction,
                "new_reinforcement": merged.reinforcement,
                "new_first_enqueued_at": first,
                "new_last_enqueued_at": now,
                "new_due_at": due,
            },
        )
        return due

    def _capped(self, messages: list[dict[str, Any]], scope: Scope, thread_id: str) -> str:
        """``messages`` as the row's JSON, cut oldest first to at most ``max_row_messages``
        messages and ``max_row_bytes`` bytes (the newest message is always kept): what one
        row may cost in LLM calls is bounded. The cut is counted and logged."""
        texts = [json.dumps(m, ensure_ascii=True) for m in messages]
        keep, size = 0, 2
        for text in reversed(texts):
            grown = size + len(text) + (2 if keep else 0)
            if keep and (keep >= self.max_row_messages or grown > self.max_row_bytes):
                break
            keep, size = keep + 1, grown
        cut = len(texts) - keep
        if cut:
            with self._trim_lock:
                self.trimmed_messages += cut
            logger.warning(
                "update queue: %s, thread %s: %d oldest message(s) cut, over the row's caps "
                "(queue_max_row_messages %d, queue_max_row_bytes %d)",
                scope,
                thread_id,
                cut,
                self.max_row_messages,
                self.max_row_bytes,
            )
        return "[" + ", ".join(texts[cut:]) + "]"

    # work ------------------------------------------------------------------------------------

    @reconnecting
    def claim(self, limit: int, *, now: datetime | None = None) -> list[PendingUpdate]:
        """Lease up to ``limit`` due rows to this queue's owner, earliest due first, at most one
        per memory and none of a memory with a row leased elsewhere."""
        if limit <= 0:
            return []
        now = now or utcnow()
        if self._with_marks is None:  # an older schema has no watermarks to read
            with database_errors(self.engine, "update queue"):
                self._with_marks = watermarks.has_table(self.engine)
        claimed: list[PendingUpdate] = []
        with self._transaction() as conn:
            while len(claimed) < limit:
                rows = self._first_of_memories(conn, limit - len(claimed), now)
                if self._dialect.locks_rows() and rows:
                    rows = self._still_free(conn, rows)
                items = self._lease(conn, rows, now)
                claimed.extend(item for item in items if item is not None and item is not _SKIPPED)
                if None not in items:
                    break
                # Rows that cannot run were marked failed: their memories' next rows may run.
        return claimed

    def _first_of_memories(self, conn: Connection, limit: int, now: datetime) -> list[Any]:
        """The earliest claimable row of each of up to ``limit`` memories, earliest due first.

        Read in due order through the ``(status, due_at)`` index, a few rows past what is
        needed, each memory's first row kept; when a busy memory's rows fill a read, the next
        leaves the memories already found out. A claim reads a handful of rows, however long
        the queue (ranking every due row per memory in SQL read the whole queue each time)."""
        found: dict[tuple[str, str, str], Any] = {}
        while True:
            wanted = limit - len(found)
            query = self._rows.claimable(skipping=bool(found), with_marks=bool(self._with_marks))
            values: dict[str, Any] = {"limit": wanted + 2, "now": now}
            if found:
                values["skipped"] = list(found)
            rows = conn.execute(query, values).all()
            for row in rows:
                found.setdefault((row.tenant_id, row.user_id, row.agent_name), row)
                if len(found) == limit:
                    return list(found.values())
            if len(rows) < wanted + 2:
                return list(found.values())

    def _still_free(self, conn: Connection, rows: Sequence[Any]) -> list[Any]:
        """``rows`` whose memory this transaction could lock (PostgreSQL). The lock is held
        until this claim commits; the lease that follows is a new statement, so its check of
        the memory (no row leased elsewhere) sees every lease committed before the lock."""
        ids = {f"id{n}": _memory_lock_id(row) for n, row in enumerate(rows)}
        locks = self._rows.advisory_locks(len(rows))
        got = conn.execute(locks, {"lock_class": _ADVISORY_LOCK_CLASS, **ids}).one()
        return [row for row, locked in zip(rows, got, strict=True) if locked]

    def _lease(
        self, conn: Connection, rows: Sequence[Any], now: datetime
    ) -> list[PendingUpdate | None]:
        """Lease the claimable ``rows`` (one statement for all), marking failed those that
        cannot run (``None`` in their place). On PostgreSQL the lease also checks that no
        concurrent claim leased another row of the memory meanwhile: rows it skips for that
        are left out."""
        items = [self._item_of(conn, row) for row in rows]
        runnable = [item for item in items if item is not None]
        if not runnable:
            return items
        keys = [
            (item.scope.tenant_id, item.scope.user_id, item.scope.agent_key, item.thread_id)
            + (item.kind,)
            for item in runnable
        ]
        leased = set(
            conn.execute(
                self._rows.lease(),
                {"owner": self.owner, "until": now + self.lease, "keys": keys, "now": now},
            ).all()
        )
        return [
            item
            if item is None
            or (item.scope.tenant_id, item.scope.user_id, item.scope.agent_key)
            + (item.thread_id, item.kind)
            in leased
            else _SKIPPED
            for item in items
        ]

    def _item_of(self, conn: Connection, row: Any) -> PendingUpdate | None:
        """The claimable ``row`` as the update it leases to, or ``None`` having marked it failed
        when it cannot run."""
        scope = Scope(row.tenant_id, row.user_id, row.agent_name or None)
        problem = None
        if row.attempts >= self.max_attempts:
            # Every earlier run died with its process: the row itself may be the cause.
            problem = f"{row.attempts} runs never finished (each process running it died)"
        else:
            try:
                messages = tuple(
                    Message.from_dict(m, index=i) for i, m in enumerate(json.loads(row.messages))
                )
            except (ValueError, TypeError) as exc:
                problem = f"the queued conversation is unreadable: {exc}"
        if problem is not None:
            conn.execute(
                self._rows.mark_failed(_key_values(scope, row.thread_id, row.kind), problem)
            )
            return None
        mark_key = getattr(row, "mark_key", None)
        return PendingUpdate(
            scope=scope,
            thread_id=row.thread_id,
            kind=row.kind,
            messages=messages,
            signals=Signals(row.correction, row.reinforcement),
            generation=row.generation,
            attempts=row.attempts + 1,
            reply=row.reply,
            mark=Mark(mark_key, row.mark_position) if mark_key is not None else None,
            mark_read=bool(self._with_marks),
            memory=Seen(
                None if row.memory_version is None else (row.memory_version, row.memory_created_at)
            ),
        )

    @reconnecting
    def renew(self, items: Sequence[PendingUpdate], *, now: datetime | None = None) -> int:
        """Extend the leases of ``items`` (runs still going) by ``lease_seconds`` from now.
        Returns how many leases were still this owner's to extend."""
        if not items:
            return 0
        now = now or utcnow()
        renewed = 0
        with self._transaction() as conn:
            for item in items:
                key = _key_values(item.scope, item.thread_id, item.kind)
                renewed += conn.execute(
                    self._rows.renew(key, self.owner, now + self.lease)
                ).rowcount
        return renewed

    @reconnecting
    def complete(self, item: PendingUpdate) -> bool:
        """The run of ``item`` succeeded: :meth:`complete_on` in a transaction of its own."""
        with self._transaction() as conn:
            return self.complete_on(conn, item)

    def complete_on(self, conn: Connection, item: PendingUpdate, mark: Mark | None = None) -> bool:
        """Complete ``item``'s row on ``conn``, inside the caller's transaction (the memory
        save's, when the memory shares this database): delete it, unless a newer conversation
        arrived meanwhile (then the row stays, released, for the next run). True if deleted.
        ``mark``: also store it as the thread's watermark (in the same statement where the
        database writes in CTEs).

        Raises:
            LeaseLostError: the row is no longer leased to this owner (its lease ran out and
                another worker took it): the caller's transaction must roll back.
        """
        parameters = {
            **_by_key(item.scope, item.thread_id, item.kind),
            "generation": item.generation,
            "owner": self.owner,
        }
        in_one = mark is not None and self._dialect.writes_in_ctes
        if in_one:
            assert mark is not None
            parameters.update(
                message_key=mark.message_key, position=mark.position, updated_at=utcnow()
            )
        elif mark is not None:
            watermarks.move_on(conn, item.scope, item.thread_id, mark)
        deleted = conn.execute(self._rows.complete(with_mark=in_one), parameters).rowcount
        if deleted:
            return True
        # A newer conversation arrived during the run: it waits its own debounce, and the
        # maximum wait counts from when it came (the run took everything before it).
        key = _key_values(item.scope, item.thread_id, item.kind)
        released = conn.execute(self._rows.release_for_newer(key, self.owner)).rowcount
        if not released:
            raise LeaseLostError(
                f"update queue: the row of {item.scope}, thread {item.thread_id} "
                "is no longer leased to this worker"
            )
        return False

    def completion(
        self, item: PendingUpdate, mark: Mark | None, saved: Callable[[], object]
    ) -> WithTheSave:
        """:meth:`complete_on` as writes that commit with a memory's save (in its statement
        where the database writes in CTEs); ``saved`` is called once they committed."""

        def write(conn: Connection) -> None:
            self.complete_on(conn, item, mark)

        parts = self._rows.completion_in_one_statement(with_mark=mark is not None)
        if parts is None:
            return WithTheSave(write=write, ctes=None, saved=saved)
        requires, ctes = parts
        key = _key_values(item.scope, item.thread_id, item.kind)
        parameters: dict[str, Any] = {
            **{f"q_{name}": value for name, value in key.items()},
            "q_owner": self.owner,
            "q_generation": item.generation,
        }
        if mark is not None:
            parameters.update(
                q_message_key=mark.message_key, q_position=mark.position, q_now=utcnow()
            )
        return WithTheSave(
            write=write,
            ctes=ctes,
            requires=requires,
            parameters=parameters,
            saved=saved,
        )

    @reconnecting
    def postpone(
        self,
        item: PendingUpdate,
        reply: str | None,
        delay_seconds: float,
        note: str,
        *,
        now: datetime | None = None,
    ) -> bool:
        """Give ``item`` back to run again after ``delay_seconds``, its attempt not counted,
        keeping ``reply`` (a parsed LLM reply as JSON) for that run unless a newer conversation
        arrived meanwhile. ``note`` is recorded as the last error. False if the lease was lost.
        """
        now = now or utcnow()
        key = _key_values(item.scope, item.thread_id, item.kind)
        with self._transaction() as conn:
            return bool(
                conn.execute(
                    self._rows.postpone(
                        key,
                        self.owner,
                        now + timedelta(seconds=delay_seconds),
                        note[:4000],
                        item.generation,
                        reply,
                    )
                ).rowcount
            )

    @reconnecting
    def fail(self, item: PendingUpdate, error: str, *, now: datetime | None = None) -> str:
        """The run of ``item`` failed with ``error``. Returns what happens next: ``retry``
        (after a back-off), ``failed`` (attempts used up), ``superseded`` (a newer conversation
        arrived and will run at its own due time) or ``lost`` (the lease had expired and another
        worker took the row)."""
        now = now or utcnow()
        key = _key_values(item.scope, item.thread_id, item.kind)
        error = error[:4000]
        with self._transaction() as conn:
            row = conn.execute(self._rows.select_for_fail(key, self.owner)).first()
            if row is None:
                return "lost"
            released: dict[str, Any] = {
                "lease_owner": None,
                "lease_until": None,
                "last_error": error,
            }
            if row.generation != item.generation:
                values: dict[str, Any]
                outcome, values = "superseded", {"attempts": 0}
                if item.kind == "flush":  # the failed run's messages are in no other row
                    unrun = [m.to_dict() for m in item.messages] + json.loads(row.messages)
                    values["messages"] = json.dumps(unrun, ensure_ascii=True)
            elif row.attempts >= self.max_attempts:
                outcome, values = "failed", {"status": "failed"}
            else:
                delay = min(self.backoff_seconds * 2 ** (row.attempts - 1), MAX_BACKOFF_SECONDS)
                outcome, values = "retry", {"due_at": now + timedelta(seconds=delay)}
            conn.execute(self._rows.update(key, {**released, **values}))
        return outcome

    @reconnecting
    def release(self, item: PendingUpdate) -> None:
        """Give ``item`` back unrun (shutting down): due now, the attempt not counted."""
        key = _key_values(item.scope, item.thread_id, item.kind)
        with self._transaction() as conn:
            conn.execute(self._rows.give_back(key, self.owner))

    # scheduling and reporting ----------------------------------------------------------------

    @reconnecting
    def next_due(self, *, now: datetime | None = None) -> datetime | None:
        """When a pending row can next be claimed: its due time, or the end of another owner's
        lease on it."""
        now = now or utcnow()
        with self._connection() as conn:
            found = conn.execute(self._rows.next_due(), {"now": now, "owner": self.owner})
            unleased, lease_end = found.one()
        times = [t for t in (unleased, lease_end) if t is not None]
        return min(times) if times else None

    @reconnecting
    def make_all_due(self, *, now: datetime | None = None) -> int:
        """Make every pending row due now (a flush). Returns how many rows that touched."""
        now = now or utcnow()
        with self._transaction() as conn:
            return conn.execute(self._rows.make_all_due(now)).rowcount

    @reconnecting
    def counts(self, *, now: datetime | None = None) -> dict[str, int]:
        """Rows ``pending`` (waiting or running), ``failed`` (given up), ``leased`` (running
        anywhere now) and ``due`` (waiting and due now)."""
        with self._connection() as conn:
            return dict(conn.execute(self._rows.counts(now or utcnow())).mappings().one())

    @reconnecting
    def oldest_pending_seconds(self, *, now: datetime | None = None) -> float:
        """How long ago the oldest pending row was first queued; 0 when none is."""
        now = now or utcnow()
        with self._connection() as conn:
            oldest = conn.execute(self._rows.oldest_pending()).scalar()
        return max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0

    # plumbing --------------------------------------------------------------------------------

    # The queue serves every tenant: its own connections see all of them (memory_sql.tenancy).

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        options = self._dialect.write_options
        with database_errors(self.engine, "update queue"), acting_for(ALL_TENANTS):
            connection = self.engine.connect().execution_options(**options)
            with connection as conn, conn.begin():
                yield conn

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        with (
            database_errors(self.engine, "update queue"),
            acting_for(ALL_TENANTS),
            self.engine.connect() as conn,
        ):
            yield conn


def _key_values(scope: Scope, thread_id: str, kind: str) -> dict[str, str]:
    return {
        "tenant_id": scope.tenant_id,
        "user_id": scope.user_id,
        "agent_name": scope.agent_key,
        "thread_id": thread_id,
        "kind": kind,
    }


def _sort_key(item: Enqueued) -> tuple[Any, ...]:
    scope = item.scope
    return (scope.tenant_id, scope.user_id, scope.agent_key, item.thread_id, item.immediate)


def _kind(item: Enqueued) -> str:
    return "flush" if item.immediate else "turn"


def _by_key(scope: Scope, thread_id: str, kind: str) -> dict[str, Any]:
    """The parameters of the key (``key_<column>``) in the statements of a run
    (:mod:`memory_sql.storage.queue_rows`), for one row."""
    return {f"key_{name}": value for name, value in _key_values(scope, thread_id, kind).items()}


def _leased(lease_until: datetime | None, now: datetime) -> bool:
    return lease_until is not None and lease_until >= now


def _memory_lock_id(row: Any) -> int:
    """The second key of the memory's advisory lock: a signed 32-bit digest of its scope."""
    name = f"{row.tenant_id}\x00{row.user_id}\x00{row.agent_name}".encode()
    return int.from_bytes(hashlib.blake2b(name, digest_size=4).digest(), "big", signed=True)
