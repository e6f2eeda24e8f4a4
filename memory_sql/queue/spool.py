"""Conversations kept in the process while the queue's database cannot take them.

When :meth:`UpdateQueue.add <memory_sql.queue.UpdateQueue.add>` fails (the database restarting
or down), the conversation waits here instead of being lost, merged per key as the queue
merges rows: a newer ``turn`` of a key replaces the older (signals OR-merged), ``flush``
messages accumulate. A background thread writes what waits, oldest first, every
``retry_seconds`` until the database answers. While anything waits, new conversations join it
rather than overtake it, so a key's conversations reach the queue in the order they came.

The spool is bounded (``max_conversations`` keys): when it is full the oldest key is dropped,
logged and counted. It lives in memory: a process that dies during an outage loses what it
held, and :meth:`Spool.close` makes a last attempt, then logs what it must drop.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ..database import OutageLog
from ..errors import StorageError
from ..intake.messages import Message
from ..intake.signals import Signals
from ..scope import Scope
from .pending import UpdateQueue

logger = logging.getLogger(__name__)

_Key = tuple[Scope, str, bool]


@dataclass(frozen=True)
class _Waiting:
    messages: tuple[Message, ...]
    signals: Signals


class Spool:
    """A bounded buffer in front of ``queue`` (see the module docstring). Thread-safe.

    ``on_queued(due)`` is called after each conversation written to the queue (the worker's
    wake-up).
    """

    def __init__(
        self,
        queue: UpdateQueue,
        *,
        max_conversations: int = 1000,
        retry_seconds: float = 2.0,
        on_queued: Callable[[datetime], None] | None = None,
    ) -> None:
        self.queue = queue
        self.max_conversations = max_conversations
        self.retry_seconds = retry_seconds
        self.on_queued = on_queued
        self.dropped = 0
        self._waiting: OrderedDict[_Key, _Waiting] = OrderedDict()
        self._writing = False  # a conversation taken out of _waiting is being written
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage = OutageLog("memory_sql spool")

    def __len__(self) -> int:
        return len(self._waiting)

    def add(
        self,
        scope: Scope,
        thread_id: str,
        messages: Sequence[Message],
        signals: Signals,
        *,
        immediate: bool,
    ) -> bool:
        """Queue the conversation, or keep it here if the queue cannot take it (or if others
        wait here already). False only when the spool is off (``max_conversations=0``) and
        the queue refused it; then the queue's :class:`StorageError` is raised instead."""
        if not self._waiting and not self._writing:
            try:
                due = self.queue.add(scope, thread_id, messages, signals, immediate=immediate)
            except StorageError as exc:
                if self.max_conversations == 0:
                    raise
                self._outage.failed(exc)
            else:
                self._queued(due)
                return True
        self._keep((scope, thread_id, immediate), _Waiting(tuple(messages), signals))
        self._start()
        self._wake.set()
        return True

    def write(self) -> int:
        """Write what waits to the queue, oldest first, until done or the queue fails.
        Returns how many conversations were written."""
        written = 0
        while True:
            with self._lock:
                if not self._waiting:
                    break
                key, waiting = self._waiting.popitem(last=False)
                self._writing = True
            scope, thread_id, immediate = key
            try:
                due = self.queue.add(
                    scope, thread_id, waiting.messages, waiting.signals, immediate=immediate
                )
            except StorageError as exc:
                self._put_back(key, waiting)
                self._outage.failed(exc)
                break
            finally:
                with self._lock:
                    self._writing = False
            written += 1
            self._queued(due)
        if written:
            logger.info("memory_sql spool: %d conversation(s) written to the queue", written)
        return written

    def close(self, timeout: float = 5.0) -> int:
        """Stop retrying, make a last attempt, and log what must be dropped; returns how many
        conversations were dropped."""
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.write()
        with self._lock:
            lost = list(self._waiting)
            self._waiting.clear()
        if lost:
            self.dropped += len(lost)
            logger.error(
                "memory_sql spool: closing with the database unavailable; %d conversation(s) "
                "dropped (%s)",
                len(lost),
                ", ".join(f"{scope} thread {thread}" for scope, thread, _ in lost[:10]),
            )
        return len(lost)

    # internals -------------------------------------------------------------------------------

    def _queued(self, due: datetime) -> None:
        self._outage.succeeded()
        if self.on_queued is not None:
            self.on_queued(due)

    def _keep(self, key: _Key, new: _Waiting) -> None:
        with self._lock:
            old = self._waiting.get(key)
            if old is not None:
                self._waiting[key] = _merged(old, new, flush=key[2])
                return
            if len(self._waiting) >= self.max_conversations:
                (scope, thread, _), _ = self._waiting.popitem(last=False)
                self.dropped += 1
                logger.warning(
                    "memory_sql spool: full (%d conversations); dropped the oldest, %s thread %s",
                    self.max_conversations,
                    scope,
                    thread,
                )
            self._waiting[key] = new

    def _put_back(self, key: _Key, waiting: _Waiting) -> None:
        """Return a conversation that could not be written to the front, merged with what
        arrived for its key meanwhile (which is newer)."""
        with self._lock:
            newer = self._waiting.pop(key, None)
            self._waiting[key] = waiting if newer is None else _merged(waiting, newer, key[2])
            self._waiting.move_to_end(key, last=False)

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
            if self._waiting:
                try:
                    self.write()
                except Exception:  # the loop must outlive any one failure
                    logger.exception("memory_sql spool: unexpected error while writing")


def _merged(old: _Waiting, new: _Waiting, flush: bool) -> _Waiting:
    """As the queue merges a key's conversations: flushes accumulate, turns are replaced."""
    messages = old.messages + new.messages if flush else new.messages
    return replace(new, messages=messages, signals=old.signals | new.signals)
