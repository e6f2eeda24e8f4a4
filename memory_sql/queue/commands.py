"""The queue as a service offers it: its rows by hand (list, retry, drop) and its counts.

:class:`QueueCommands` is mixed into :class:`memory_sql.MemoryService`, which gives it the
``queue``, its ``worker`` and the ``spool`` in front of it. The rows' keys and what a retry or
a drop does are :mod:`memory_sql.queue.manage`'s.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..models import utcnow
from . import manage
from .manage import QueueChange, QueuedUpdate, UpdateKey
from .pending import UpdateQueue
from .spool import Spool
from .worker import UpdateWorker


class QueueCommands:
    """The queue's rows and counts, for an object holding ``queue``, ``worker`` and ``spool``."""

    queue: UpdateQueue
    worker: UpdateWorker
    spool: Spool

    def pending_updates(
        self,
        *,
        failed_only: bool = False,
        tenant_id: str | None = None,
        user_id: str | None = None,
        agent_name: str | None = None,
        limit: int | None = None,
    ) -> list[QueuedUpdate]:
        """The queue's rows (every process's): :func:`memory_sql.queue.manage.list_updates`.
        Each has its ``key``, for :meth:`retry_failed` and :meth:`drop_updates`."""
        return manage.list_updates(
            self.queue.engine,
            failed_only=failed_only,
            tenant_id=tenant_id,
            user_id=user_id,
            agent_name=agent_name,
            limit=limit,
        )

    def retry_failed(self, keys: Iterable[str | UpdateKey] | None = None) -> QueueChange:
        """Run the rows ``keys`` name (every ``failed`` row if None) again, due now:
        :func:`memory_sql.queue.manage.retry_updates`; a started worker runs them at once."""
        change = manage.retry_updates(self.queue.engine, keys)
        if change.changed:
            self.worker.notify(utcnow())
        return change

    def drop_updates(self, keys: Iterable[str | UpdateKey] | None = None) -> QueueChange:
        """Delete the rows ``keys`` name (every ``failed`` row if None), unlearned:
        :func:`memory_sql.queue.manage.drop_updates`."""
        return manage.drop_updates(self.queue.engine, keys)

    def queue_status(self) -> dict[str, int]:
        """``pending`` and ``failed`` rows in the queue (all processes), ``leased`` (running
        anywhere), ``in_flight`` (running here), ``completed`` / ``failed_runs`` /
        ``postponed`` (runs here since start; postponed: lost to version conflicts, run again),
        ``spooled`` (conversations waiting in this process's spool file for the database),
        ``spool_refused`` (conversations not taken since start, the database away and the
        spool full: ``after_agent`` said False, the service 503), ``trimmed_messages``
        (cut oldest first from queue rows over ``queue_max_row_messages`` or
        ``queue_max_row_bytes`` since start).

        Raises:
            StorageError: the queue's database cannot be read.
        """
        counts = self.queue.counts()
        return {
            "pending": counts["pending"],
            "failed": counts["failed"],
            "leased": counts["leased"],
            "in_flight": self.worker.in_flight,
            "completed": self.worker.completed,
            "failed_runs": self.worker.failed,
            "postponed": self.worker.postponed,
            "spooled": len(self.spool),
            "spool_refused": self.spool.refused,
            "trimmed_messages": self.queue.trimmed_messages,
        }
