"""What tells a worker that another process queued work: a wake-up source per database.

PostgreSQL: revision 0013's triggers send ``NOTIFY memory_sql_queue`` with the earliest due time
(seconds since the epoch) whenever a statement leaves a queue row claimable, at its commit.
:class:`NotifyListener` is a thread with a connection of its own (``application_name``
``memory-sql-listener``) that LISTENs and hands each due time to the worker, which schedules its
wake-up for that moment. A notification is not durable: one sent while the listener is not
connected is lost. So every (re)connection is followed by a look at the queue
(``on_connected``); a lost connection is reopened after 0.5 s, doubling to 5 s while the
database is away; TCP keepalives notice a peer that vanished; and the worker's sweep stays
the last safety net.

SQLite has no NOTIFY. :class:`ChangePoller` reads ``PRAGMA data_version`` every
:data:`POLL_SECONDS` on a connection of its own: the number changes when another connection
(of any process) committed to the file, and then ``on_change`` lets the worker read the next
due time and schedule its wake-up for it. The pragma reads no page, so an idle poll costs
microseconds.

Both call back from their own thread; a callback's failure is logged and the thread goes on.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from ..database import OutageLog, note_server, redacted
from ..driver_errors import DRIVER_ERRORS
from ..models import utcnow
from .dialects import database_file, dialect_of

logger = logging.getLogger(__name__)

CHANNEL = "memory_sql_queue"
"""The channel revision 0013's triggers notify on."""
LISTENER_NAME = "memory-sql-listener"
"""The ``application_name`` of the listener's connection (seen in ``pg_stat_activity``)."""
POLL_SECONDS = 0.25
"""How often a SQLite worker looks at the database's change counter."""
RECONNECT_SECONDS = (0.5, 5.0)
"""The listener's first wait before reconnecting, and the longest (it doubles in between)."""
_IDLE_SECONDS = 0.25  # the listener looks at its stop flag this often


class _Watcher:
    """A daemon thread running ``_run`` until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop watching: the thread ends within a quarter of a second."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            logger.exception("memory update worker: a queue wake-up failed")


class NotifyListener(_Watcher):
    """LISTENs on :data:`CHANNEL` for ``engine``'s PostgreSQL database in a thread of its own;
    calls ``on_due`` with each notified due time and ``on_connected`` after each connection
    (notifications sent before it may have been missed)."""

    def __init__(
        self,
        engine: Engine,
        on_due: Callable[[datetime], None],
        on_connected: Callable[[], None],
    ) -> None:
        super().__init__("memory-sql-listener")
        self._connect_args = _connect_args(engine)
        self._label = str(redacted(engine.url))  # failovers logged once with the engine's
        self._on_due = on_due
        self._on_connected = on_connected
        self._outage = OutageLog("memory update worker: queue listener")
        self.backend_pid: int | None = None
        """The server process of the current connection (None while not connected)."""
        self.connections = 0
        """How many times the listener has connected (reconnections are the rest)."""

    def _run(self) -> None:
        import psycopg

        delay = RECONNECT_SECONDS[0]
        while not self._stop.is_set():
            try:
                with psycopg.connect(**self._connect_args) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.backend_pid = conn.info.backend_pid
                    note_server(self._label, f"{conn.info.host}:{conn.info.port}")
                    self.connections += 1
                    self._outage.succeeded()
                    delay = RECONNECT_SECONDS[0]
                    self._call(self._on_connected)
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=_IDLE_SECONDS):
                            self._call(self._on_due, due_time(note.payload))
            except DRIVER_ERRORS as exc:
                if self._stop.is_set():
                    break
                self._outage.failed(exc)
            finally:
                self.backend_pid = None
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, RECONNECT_SECONDS[1])


class ChangePoller(_Watcher):
    """Calls ``on_change`` when another connection committed to the SQLite file ``path``,
    looking every ``interval`` seconds from a thread of its own."""

    def __init__(
        self, path: Path, on_change: Callable[[], None], *, interval: float = POLL_SECONDS
    ) -> None:
        super().__init__("memory-sql-poller")
        self.path = path
        self.interval = interval
        self._on_change = on_change
        self.changes = 0
        """How many changes were seen (each one ``on_change`` call)."""

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        seen: int | None = None
        try:
            while not self._stop.is_set():
                try:
                    if conn is None:
                        # mode=rw: never create the file; autocommit: never hold a snapshot.
                        conn = sqlite3.connect(
                            f"{self.path.resolve().as_uri()}?mode=rw",
                            uri=True,
                            isolation_level=None,
                            check_same_thread=False,
                        )
                    version = conn.execute("PRAGMA data_version").fetchone()[0]
                except DRIVER_ERRORS as exc:
                    logger.debug("memory update worker: cannot read %s: %s", self.path, exc)
                    if conn is not None:
                        conn.close()
                    conn, seen = None, None  # a new connection's counter starts afresh
                else:
                    # A first reading looks too: a commit just before it would go unseen.
                    if version != seen:
                        self.changes += seen is not None
                        self._call(self._on_change)
                    seen = version
                self._stop.wait(self.interval)
        finally:
            if conn is not None:
                conn.close()


def due_time(payload: str) -> datetime:
    """The due time a notification carries (seconds since the epoch); now if unreadable."""
    try:
        return datetime.fromtimestamp(float(payload), timezone.utc)
    except (ValueError, OverflowError, OSError):
        return utcnow()


def wakeup_source(
    engine: Engine, *, on_due: Callable[[datetime], None], on_change: Callable[[], None]
) -> NotifyListener | ChangePoller | None:
    """The wake-up source for ``engine``'s database (not started): a listener on PostgreSQL,
    a poller for a SQLite file, None for an in-memory SQLite database (no other process)."""
    if dialect_of(engine).notifies:
        return NotifyListener(engine, on_due, on_change)
    database = database_file(engine.url)
    if database is None or (engine.url.database or "").startswith("file:"):
        return None  # a URI-opened file is not polled
    return ChangePoller(Path(database), on_change)


def _connect_args(engine: Engine) -> dict[str, Any]:
    """psycopg.connect's arguments for ``engine``'s database, as the engine itself connects
    (host, port, user, password, sslmode…), autocommit, named and kept alive."""
    _args, params = engine.dialect.create_connect_args(engine.url)
    params = dict(params)
    params.pop("options", None)  # the engine's statement timeouts: the listener runs none
    params.update(
        autocommit=True,
        connect_timeout=10,
        application_name=LISTENER_NAME,
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
    )
    return params
