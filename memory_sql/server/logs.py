"""Rate-limited logging for ``memory-sql serve``: abuse must not become a flood of log lines.

:class:`RateLimitFilter` lets through at most ``burst`` records of one kind per ``window``
seconds, where a kind is the logger and message template of a warning or error (uvicorn's
"Exceeded concurrency limit.", "Invalid HTTP request received.", a closed slow connection), or
the access line of a refused request (status 4xx); the rest of that window is counted, and
said in one line when the kind is next let through. Access lines of answered requests and
records below WARNING pass untouched.
"""

from __future__ import annotations

import json
import logging
import threading
import time

ACCESS_LOGGER = "memory_sql.server.access"


class RateLimitFilter(logging.Filter):
    """See the module docstring. Thread-safe; attach it to a handler."""

    def __init__(self, burst: int = 20, window: float = 10.0) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.suppressed = 0
        self._lock = threading.Lock()
        # kind -> (window start, let through in it, suppressed since the last let through)
        self._kinds: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _kind(record)
        if kind is None:
            return True
        now = time.monotonic()
        with self._lock:
            state = self._kinds.get(kind)
            if state is None or now - state[0] >= self.window:
                held = int(state[2]) if state is not None else 0
                self._kinds[kind] = [now, 1, 0]
                if len(self._kinds) > 10_000:  # kinds are templates: only a bug gets here
                    self._kinds.clear()
                if held:
                    record.msg = f"{record.msg} ({held} more like this suppressed)"
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            self.suppressed += 1
            return False


def _kind(record: logging.LogRecord) -> tuple[str, str] | None:
    if record.name == ACCESS_LOGGER:
        try:
            status = int(json.loads(record.getMessage())["status"])
        except (ValueError, KeyError, TypeError):
            return None
        return (record.name, "4xx") if 400 <= status < 500 else None
    if record.levelno < logging.WARNING:
        return None
    return (record.name, str(record.msg))
