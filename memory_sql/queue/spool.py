"""Conversations kept on local disk while the queue's database cannot take them.

A conversation the spool takes is kept: it is in the queue, or in this process's spool file
(:mod:`.journal`), synced to disk before :meth:`Spool.add` returns, so neither a restart of the
database nor the process being killed loses it. When neither can take it, :meth:`Spool.add`
raises :class:`~memory_sql.errors.SpoolFullError` and the caller keeps the conversation: the
HTTP service answers 503 with ``Retry-After``, ``after_agent`` returns False and counts it.
Nothing the spool took is ever dropped.

- **When it spools.** A conversation goes to the queue directly unless the database is known
  to be away (the last write failed and no write has succeeded since) or its own key
  (tenant, user, agent, thread, kind) still has conversations in the spool: then it is
  spooled behind them, so one key's conversations reach the queue in the order they came.
  Other keys never wait for the spool, so there is no "everyone joins the spool" cliff once
  the database answers.
- **How it drains.** A background thread writes the spool to the queue oldest first, in
  batches of up to ``batch_size`` in one transaction (:meth:`UpdateQueue.add_many
  <memory_sql.queue.UpdateQueue.add_many>`, with the same per-key merging as single adds),
  every ``retry_seconds`` while the database is away and back to back once it answers.
- **Bounds.** At most ``max_conversations`` conversations in this process's spool, and at most
  ``max_per_tenant`` of any one tenant: a tenant fills its own share and no more, and never
  pushes out another tenant's (nor its own) conversations.
- **Writes to disk** are grouped: concurrent adds share one commit (one ``fsync``).
- **Its files** live in ``directory``, one per process (``spool-<n>.db``); a new process adopts
  the files of processes that died with conversations left, and drains them.

A conversation the database refuses (it answers, with an error that is not an outage: a rule
of the operator's, say) holds back no other: the batch is written one by one, and the one
refused stays in the spool file, logged, skipped until the next start.

A conversation written to the queue but not yet removed from the spool file when the process
dies is written again by the next owner: the queue merges it as the same conversation again
(a turn replaces itself, a repeated flush is kept once), so the effect is the same.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL

from ..database import OutageLog
from ..errors import SpoolFullError, StorageError
from ..intake.messages import Message
from ..intake.signals import Signals
from ..models import utcnow
from ..scope import Scope
from ..storage.dialects import database_file
from .journal import Journal, Spooled, claim_slot, orphans
from .pending import Enqueued, UpdateQueue

logger = logging.getLogger(__name__)
_refusals = logging.getLogger("memory_sql.spool.refused")

_Key = tuple[str, str, str | None, str, bool]


@dataclass
class _Append:
    """A conversation waiting for the grouped commit."""

    item: Enqueued
    came: datetime
    done: bool = False
    error: BaseException | None = None
    waiters: list[threading.Event] = field(default_factory=list)


class Spool:
    """The durable, bounded spool in front of ``queue`` (see the module docstring).
    Thread-safe.

    ``directory`` holds the spool files; ``None`` keeps none: a conversation the queue cannot
    take is refused at once. ``on_queued(due)`` is called after conversations were written to
    the queue (the worker's wake-up).
    """

    def __init__(
        self,
        queue: UpdateQueue,
        *,
        directory: Path | None,
        max_conversations: int = 100_000,
        max_per_tenant: int = 10_000,
        retry_seconds: float = 2.0,
        batch_size: int = 500,
        on_queued: Callable[[datetime], None] | None = None,
    ) -> None:
        self.queue = queue
        self.directory = directory
        self.max_conversations = max_conversations if directory is not None else 0
        self.max_per_tenant = min(max_per_tenant, self.max_conversations)
        self.retry_seconds = retry_seconds
        self.batch_size = batch_size
        self.on_queued = on_queued
        self.refused = 0
        """Conversations refused (:class:`SpoolFullError`) since start."""
        self.written = 0
        """Spooled conversations written to the queue since start."""
        self._journals: list[Journal] = []  # [0] takes new rows; the rest are adopted
        self._own: Journal | None = None
        self._keys: Counter[_Key] = Counter()
        self._tenants: Counter[str] = Counter()
        self._total = 0  # the sum of _tenants
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()  # one grouped commit at a time
        self._waiting: list[_Append] = []
        self._refused_rows: set[int] = set()  # row ids the queue refused (not an outage)
        self._drain_lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage = OutageLog("memory_sql spool")
        self._adopt()

    def __len__(self) -> int:
        with self._lock:
            return self._total

    def tenant_count(self, tenant_id: str) -> int:
        """Conversations of ``tenant_id`` in this process's spool."""
        with self._lock:
            return self._tenants.get(tenant_id, 0)

    @property
    def database_away(self) -> bool:
        """The last write to the queue failed and none has succeeded since."""
        return self._outage.down

    def add(
        self,
        scope: Scope,
        thread_id: str,
        messages: Sequence[Message],
        signals: Signals,
        *,
        immediate: bool,
    ) -> bool:
        """Queue the conversation, or spool it (see the module docstring); True once it is
        kept.

        Raises:
            SpoolFullError: neither the queue nor the spool can take it; nothing was kept.
        """
        item = Enqueued(scope, thread_id, tuple(messages), signals, immediate)
        key = _key(item)
        direct = not self._outage.down or self.max_conversations == 0
        if direct and key not in self._keys:
            try:
                due = self.queue.add(scope, thread_id, messages, signals, immediate=immediate)
            except StorageError as exc:
                self._outage.failed(exc)
                if self.max_conversations == 0:
                    self.refused += 1
                    raise SpoolFullError(
                        "the queue's database is unavailable and no spool is configured",
                        retry_after=self.retry_seconds,
                    ) from exc
            else:
                self._queued(due)
                return True
        self._keep(item, key)
        self._start()
        if not self._outage.down:  # a key behind its own spooled ones: write them now
            self._wake.set()
        return True

    def log_refusal(self, thread_id: str, user_id: str | None, exc: SpoolFullError) -> None:
        """Log a refused conversation (``add`` raised ``exc``) on the ``memory_sql.spool.
        refused`` logger: the 1st, 2nd, 4th, 8th… since start, not one line each."""
        refused = self.refused
        if refused & (refused - 1) == 0:
            _refusals.warning(
                "memory_sql: thread %r of user %r not kept (%d refused since start): %s",
                thread_id,
                user_id,
                refused,
                exc,
            )

    def write(self) -> int:
        """Write what is spooled to the queue, oldest first in batches, until it is empty or
        the queue fails. Returns how many conversations were written."""
        written = 0
        with self._drain_lock:
            for journal in list(self._journals):
                while True:
                    batch = journal.take(self.batch_size, skip=frozenset(self._refused_rows))
                    if not batch:
                        break
                    try:
                        dues = self.queue.add_many([entry.item for entry in batch])
                    except StorageError as exc:
                        if _unreachable(exc):
                            self._outage.failed(exc)
                            self._log_written(written)
                            return written
                        # The database answered, and refused the batch: one by one, so that
                        # the conversation it refuses does not hold back the others.
                        done, reachable = self._write_each(journal, batch)
                        written += done
                        if not reachable:
                            self._log_written(written)
                            return written
                        continue
                    journal.remove([entry.id for entry in batch])
                    self._forget(batch)
                    written += len(batch)
                    self._queued(min(dues))
                if journal is not self._own and not len(journal):
                    self._retire(journal)
        self._log_written(written)
        return written

    def _write_each(self, journal: Journal, batch: Sequence[Spooled]) -> tuple[int, bool]:
        """Write ``batch`` one conversation at a time; one the database refuses stays in the
        spool file, skipped until the next start, and is logged. Returns how many were
        written, and False if the database stopped answering."""
        written = 0
        for entry in batch:
            item = entry.item
            try:
                due = self.queue.add(
                    item.scope,
                    item.thread_id,
                    item.messages,
                    item.signals,
                    immediate=item.immediate,
                )
            except StorageError as exc:
                if _unreachable(exc):
                    self._outage.failed(exc)
                    return written, False
                self._refused_rows.add(entry.id)
                logger.error(
                    "memory_sql spool: the queue refuses the spooled conversation of %s, "
                    "thread %s (%s); it stays in %s and is tried again at the next start",
                    item.scope,
                    item.thread_id,
                    exc,
                    journal.path,
                )
                continue
            journal.remove([entry.id])
            self._forget([entry])
            written += 1
            self._queued(due)
        return written, True

    def close(self, timeout: float = 5.0) -> int:
        """Stop the background thread, make a last attempt to write, and close the files.
        Returns how many conversations stay spooled on disk for the next process."""
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.write()
        except StorageError as exc:
            logger.error("memory_sql spool: cannot read the spool while closing: %s", exc)
        left = len(self)
        with self._lock:
            journals, self._journals, self._own = self._journals, [], None
        for journal in journals:
            journal.close()
        if left:
            logger.warning(
                "memory_sql spool: closing with the database unavailable; %d conversation(s) "
                "stay in %s for the next start",
                left,
                self.directory,
            )
        return left

    # internals -------------------------------------------------------------------------------

    def _keep(self, item: Enqueued, key: _Key) -> None:
        tenant = item.scope.tenant_id
        with self._lock:
            if (
                self._total >= self.max_conversations
                or self._tenants[tenant] >= self.max_per_tenant
            ):
                self.refused += 1
                refused = True
            else:
                refused = False
                self._count(key, 1)
        if refused:
            raise SpoolFullError(self._full_message(tenant), retry_after=self.retry_seconds)
        entry = _Append(item, utcnow())
        try:
            self._commit(entry)
        except BaseException:
            with self._lock:
                self._count(key, -1)
                self.refused += 1
            raise

    def _commit(self, entry: _Append) -> None:
        """Append ``entry`` in a grouped commit: whoever finds no commit running writes every
        entry waiting, in one transaction, and the others wait for it."""
        with self._lock:
            self._waiting.append(entry)
        while True:
            if self._commit_lock.acquire(timeout=0.05):
                try:
                    with self._lock:
                        batch, self._waiting = self._waiting, []
                    if batch:
                        self._append(batch)
                finally:
                    self._commit_lock.release()
            if entry.done:
                if entry.error is not None:
                    raise SpoolFullError(
                        f"the queue's database is unavailable and the spool cannot be "
                        f"written: {entry.error}",
                        retry_after=self.retry_seconds,
                    ) from entry.error
                return

    def _append(self, batch: list[_Append]) -> None:
        error: BaseException | None = None
        try:
            journal = self._writable()
            journal.append([(entry.item, entry.came) for entry in batch])
        except StorageError as exc:
            error = exc
            logger.error("memory_sql spool: %s", exc)
        for entry in batch:
            entry.error = error
            entry.done = True

    def _writable(self) -> Journal:
        with self._lock:
            if self._own is None:
                if self.directory is None:
                    raise StorageError("no spool directory is configured")
                self._own = claim_slot(self.directory)
                self._journals.insert(0, self._own)
                # The slot's file may hold rows of a process that died since this one started.
                for key, rows in self._own.tenants().items():
                    self._count(key, rows)
                logger.info("memory_sql spool: conversations are spooled in %s", self._own.path)
            return self._own

    def _adopt(self) -> None:
        """Take over the spool files of processes that died with conversations in them."""
        if self.directory is None:
            return
        try:
            found = list(orphans(self.directory))
        except StorageError as exc:
            logger.error("memory_sql spool: cannot look for spooled conversations: %s", exc)
            return
        for journal in found:
            counts = journal.tenants()
            with self._lock:
                self._journals.append(journal)
                for key, rows in counts.items():
                    self._count(key, rows)
            logger.warning(
                "memory_sql spool: %d conversation(s) left in %s by a process that stopped; "
                "writing them to the queue",
                sum(counts.values()),
                journal.path,
            )
        if found:
            self._start()
            self._wake.set()

    def _retire(self, journal: Journal) -> None:
        with self._lock:
            if journal in self._journals:
                self._journals.remove(journal)
        journal.close()  # left empty: another process may already own it again

    def _forget(self, batch: Sequence[Spooled]) -> None:
        with self._lock:
            for entry in batch:
                self._count(_key(entry.item), -1)
            self.written += len(batch)

    def _count(self, key: _Key, rows: int) -> None:
        """Count ``rows`` more (or fewer) spooled conversations of ``key``; under the lock."""
        tenant = key[0]
        self._keys[key] += rows
        if self._keys[key] <= 0:
            del self._keys[key]
        self._tenants[tenant] += rows
        if self._tenants[tenant] <= 0:
            del self._tenants[tenant]
        self._total += rows

    def _full_message(self, tenant: str) -> str:
        if self._tenants[tenant] >= self.max_per_tenant:
            return (
                f"the queue's database is unavailable and tenant {tenant!r} has "
                f"{self._tenants[tenant]} conversations spooled, its share "
                f"(spool_max_per_tenant {self.max_per_tenant}): send it again later"
            )
        if self.max_conversations == 0:
            return "the queue's database is unavailable and no spool is configured"
        return (
            f"the queue's database is unavailable and the spool is full "
            f"(spool_max_conversations {self.max_conversations}): send it again later"
        )

    def _queued(self, due: datetime) -> None:
        self._outage.succeeded()
        if self.on_queued is not None:
            self.on_queued(due)

    def _log_written(self, written: int) -> None:
        if written:
            logger.info("memory_sql spool: %d conversation(s) written to the queue", written)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closing.is_set():
                return
            self._thread = threading.Thread(
                target=self._retry_loop, name="memory-sql-spool", daemon=True
            )
            self._thread.start()

    def _retry_loop(self) -> None:
        while not self._closing.is_set():
            self._wake.wait(self.retry_seconds)
            self._wake.clear()
            if self._closing.is_set():
                return
            if len(self):
                try:
                    self.write()
                except Exception:  # the loop must outlive any one failure
                    logger.exception("memory_sql spool: unexpected error while writing")


def spool_directory(configured: Path | None, url: URL) -> Path:
    """Where the spool files of the queue at ``url`` go: ``configured`` (``spool_dir``), else
    next to a SQLite file, else a folder of the user's state directory named by a digest of the
    URL (so the processes of one database share it)."""
    if configured is not None:
        return Path(configured)
    database = database_file(url)
    if database is not None:
        return Path(f"{database}.spool")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    name = url.render_as_string(hide_password=True)
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return Path(state) / "memory_sql" / "spool" / digest


def _unreachable(exc: StorageError) -> bool:
    """Whether ``exc`` is the database being away (or busy: a deadlock, a lost connection),
    to be tried again later, rather than it refusing what was written."""
    return isinstance(exc.__cause__, (sa.exc.OperationalError, sa.exc.InterfaceError)) or not (
        isinstance(exc.__cause__, sa.exc.DBAPIError)
    )


def _key(item: Enqueued) -> _Key:
    scope = item.scope
    return (scope.tenant_id, scope.user_id, scope.agent_name, item.thread_id, item.immediate)
