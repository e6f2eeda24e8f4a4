"""The recent requests of this process, for the web console's request log: an in-memory ring
of :class:`LoggedRequest` (method, route template, status, duration, key id, tenant), fed by
:class:`~memory_sql.server.requests.RequestMiddleware`. No bodies, no query strings, no paths
(which hold user ids): what the access log says, and nothing more. Lost on restart."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime

DEFAULT_SIZE = 1000
"""How many requests the ring keeps (the oldest are dropped first)."""


@dataclass(frozen=True)
class LoggedRequest:
    at: datetime
    request_id: str
    method: str
    route: str
    status: int
    ms: float
    key_id: str | None
    tenant_id: str | None


class RequestLog:
    """The last ``size`` requests; safe to share between threads."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._entries: deque[LoggedRequest] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._entries.append(entry)

    def recent(self, tenant_id: str, limit: int = 200) -> list[LoggedRequest]:
        """``tenant_id``'s requests, newest first, at most ``limit``."""
        with self._lock:
            entries = list(self._entries)
        mine = [entry for entry in reversed(entries) if entry.tenant_id == tenant_id]
        return mine[:limit]
