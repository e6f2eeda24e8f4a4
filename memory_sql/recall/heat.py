"""How often facts are shown, counted off the agent's turn.

A ranked context records which of its facts it showed (:meth:`AccessHeat.record`): a counter in
this process, no database write. A background thread hands the counts to the storage
(:meth:`MemoryStorage.record_access <memory_sql.storage.MemoryStorage.record_access>`) every
``access_heat_flush_seconds`` and at :meth:`AccessHeat.close`. The heat feeds the hybrid
eviction policy (:mod:`memory_sql.update.eviction`).

Lossy by design: counts not yet written are lost if the process dies, counts of more than
:data:`MAX_PENDING` distinct facts wait for the next write are dropped (and counted in
``dropped``), and a write that fails drops its counts (logged once per failure). Heat is a
hint for eviction; it is never worth slowing a turn or growing without bound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timezone

from ..scope import Scope
from ..storage import MemoryStorage

logger = logging.getLogger(__name__)

MAX_PENDING = 50_000
"""Distinct (memory, fact) counts held between two writes."""


class AccessHeat:
    """Counts of facts shown, written to ``storage`` in the background every ``interval``
    seconds (the thread starts with the first count)."""

    def __init__(self, storage: MemoryStorage, interval: float) -> None:
        self.storage = storage
        self.interval = interval
        self.dropped = 0
        self.written = 0
        self._pending: dict[tuple[Scope, str], tuple[int, datetime]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def record(self, scope: Scope, fact_ids: Iterable[str]) -> None:
        """Count one showing of each of ``fact_ids`` of ``scope``'s memory. Never raises."""
        now = datetime.now(timezone.utc)
        with self._lock:
            if self._closed:
                return
            pending = self._pending
            for fact_id in fact_ids:
                key = (scope, fact_id)
                seen = pending.get(key)
                if seen is not None:
                    pending[key] = (seen[0] + 1, now)
                elif len(pending) < MAX_PENDING:
                    pending[key] = (1, now)
                else:
                    self.dropped += 1
            if self._thread is None and pending:
                self._thread = threading.Thread(
                    target=self._run, name="memory-sql-access-heat", daemon=True
                )
                self._thread.start()

    def flush(self) -> int:
        """Write the counts held now; returns how many facts' counts were written."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        try:
            self.storage.record_access(pending)
        except Exception as exc:
            logger.warning("memory_sql: access heat of %d facts not written: %s", len(pending), exc)
            return 0
        self.written += len(pending)
        return len(pending)

    def close(self) -> None:
        """Write what is held and stop the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=10)
        self.flush()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            if self._closed:
                return
            self.flush()
