"""Logging for ``memory-sql serve``: its format, quiet libraries, and a rate limit.

:func:`configure` sets up the root logger: ``text`` (``time LEVEL logger [request id]
message``) or ``json`` (one object a line: ``time``, ``level``, ``logger``, ``request_id``,
``message``, and an access line's own fields at the top level); the libraries' INFO chatter
(:data:`CHATTY_LIBRARIES`) held back unless asked for.

Rate limit: abuse must not become a flood of log lines.

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
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
CHATTY_LIBRARIES = ("apscheduler", "mcp", "sse_starlette", "httpx", "httpx2", "openai")
"""Loggers whose INFO records say nothing an operator acts on (APScheduler's "Added job",
"Running job", "executed successfully"; the MCP SDK's "Terminating session: None"; the
LLM client's "HTTP Request: POST …")."""


class ClientGoneFilter(logging.Filter):
    """Drops a record whose exception is a client that disconnected mid-request (the MCP SDK
    logs it as an error with its traceback): the access line says it, status 499."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and type(exc).__name__ == "ClientDisconnect")


def configure(
    level: str, log_format: str = "text", *, third_party: bool = False
) -> logging.Handler:
    """Log to stderr at ``level`` in ``log_format`` (``text`` or ``json``); below WARNING the
    libraries of :data:`CHATTY_LIBRARIES` stay quiet unless ``third_party``. Returns the
    handler (for its filters)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler.addFilter(ClientGoneFilter())
    root.addHandler(handler)
    root.setLevel(level)
    quiet = max(logging.WARNING, logging.getLevelName(level))
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if third_party else quiet)
    # APScheduler's warnings are about the worker's own timers ("maximum number of running
    # instances reached": a sweep still running when the next is due), not for an operator.
    if not third_party:
        logging.getLogger("apscheduler").setLevel(max(logging.ERROR, quiet))
    return handler


class JsonFormatter(logging.Formatter):
    """One JSON object a record; an access line's fields (a JSON message) at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
        }
        message = record.getMessage()
        fields = None
        if record.name == ACCESS_LOGGER:
            try:
                fields = json.loads(message)
            except ValueError:
                fields = None
        if isinstance(fields, dict):
            line.update(fields)
        else:
            line["message"] = message
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)

    converter = time.gmtime  # type: ignore[assignment]  # typeshed: the stub takes no argument


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
