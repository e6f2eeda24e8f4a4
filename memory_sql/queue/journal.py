"""The spool's file: conversations kept on local disk while the queue's database is away.

A :class:`Journal` is one SQLite file (WAL, ``synchronous=FULL``; its SQL is
:mod:`memory_sql.storage.spool_file`'s): :meth:`~Journal.append`
returns only once its rows are committed and synced to disk, so a conversation the spool took
survives the process being killed, and the machine losing power. Rows are appended, never
changed, and removed by id once the queue holds them (:meth:`~Journal.remove`).

A directory holds one file per process that spooled: ``spool-<n>.db``, each owned by the process
holding an exclusive ``flock`` on its ``spool-<n>.lock`` (released by the kernel when the
process dies, however it dies). :func:`claim_slot` gives a process the first free file;
:func:`orphans` the files of processes that died with rows left, for a new process to adopt
and drain.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..driver_errors import driver_errors, quietly
from ..errors import StorageError
from ..intake.messages import Message
from ..intake.signals import Signals
from ..scope import Scope
from ..storage import spool_file as sql
from .pending import Enqueued

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: one process per spool directory
    # typeshed types fcntl as always there; here it is not (checked before each use).
    fcntl = None  # type: ignore[assignment]

MAX_SLOTS = 1024


@dataclass(frozen=True)
class Spooled:
    """A conversation as the journal holds it, with its row id."""

    id: int
    item: Enqueued


class Journal:
    """One spool file, owned by this process while it is open. Thread-safe."""

    def __init__(self, path: Path, lock_file: int | None = None) -> None:
        self.path = path
        self._lock_file = lock_file
        self._lock = threading.Lock()
        try:
            with driver_errors(f"cannot open the spool file {path}"):
                self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                for statement in sql.OPEN:
                    self._db.execute(statement)
        except StorageError:
            self._release_lock()
            raise

    def append(self, items: Sequence[tuple[Enqueued, datetime]]) -> list[int]:
        """Write ``items`` (each with the time it came) in one transaction, synced to disk
        before this returns; their row ids, in order.

        Raises:
            StorageError: the file cannot be written (disk full, removed, read-only).
        """
        rows = [
            (
                item.scope.tenant_id,
                item.scope.user_id,
                item.scope.agent_name,
                item.thread_id,
                int(item.immediate),
                json.dumps([m.to_dict() for m in item.messages], ensure_ascii=True),
                int(item.signals.correction),
                int(item.signals.reinforcement),
                came.isoformat(),
            )
            for item, came in items
        ]
        with self._writing() as db:
            ids = []
            for row in rows:
                cursor = db.execute(sql.APPEND, row)
                ids.append(int(cursor.lastrowid or 0))
            return ids

    def take(self, limit: int, *, skip: frozenset[int] = frozenset()) -> list[Spooled]:
        """Up to ``limit`` rows, oldest first, but those of ``skip`` (they stay until
        :meth:`remove`)."""
        with self._reading() as db:
            rows = db.execute(sql.TAKE, (limit + len(skip),)).fetchall()
        return [_spooled(row) for row in rows if row[0] not in skip][:limit]

    def remove(self, ids: Sequence[int]) -> None:
        """Delete the rows ``ids`` (now in the queue)."""
        with self._writing() as db:
            for start in range(0, len(ids), sql.REMOVE_AT_ONCE):
                chunk = list(ids[start : start + sql.REMOVE_AT_ONCE])
                db.execute(sql.remove(len(chunk)), chunk)

    def tenants(self) -> dict[tuple[str, str, str | None, str, bool], int]:
        """How many rows each key (tenant, user, agent, thread, immediate) has."""
        with self._reading() as db:
            rows = db.execute(sql.KEYS).fetchall()
        return {(t, u, a, th, bool(i)): n for t, u, a, th, i, n in rows}

    def __len__(self) -> int:
        with self._reading() as db:
            return int(db.execute(sql.COUNT).fetchone()[0])

    def close(self) -> None:
        """Close the file and give up its ownership (its rows stay for the next owner)."""
        with self._lock:
            with quietly():
                self._db.close()
            self._release_lock()

    # plumbing --------------------------------------------------------------------------------

    def _writing(self) -> _Transaction:
        return _Transaction(self, write=True)

    def _reading(self) -> _Transaction:
        return _Transaction(self, write=False)

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            with suppress(OSError):
                os.close(self._lock_file)  # closing the descriptor releases its flock
            self._lock_file = None


class _Transaction:
    def __init__(self, journal: Journal, *, write: bool) -> None:
        self.journal = journal
        self.write = write

    def __enter__(self) -> sqlite3.Connection:
        self.journal._lock.acquire()
        db = self.journal._db
        if self.write:
            try:
                with driver_errors(f"cannot write the spool file {self.journal.path}"):
                    db.execute(sql.BEGIN_WRITE)
            except StorageError:
                self.journal._lock.release()
                raise
        return db

    def __exit__(self, exc_type: object, exc: BaseException | None, _tb: object) -> None:
        db = self.journal._db
        verb = "write" if self.write else "read"
        try:
            with driver_errors(f"cannot {verb} the spool file {self.journal.path}"):
                if self.write and exc_type is None:
                    try:
                        db.execute(sql.COMMIT)
                    except BaseException:
                        with quietly():
                            db.execute(sql.ROLLBACK)
                        raise
                elif self.write:
                    with quietly():
                        db.execute(sql.ROLLBACK)
                if exc is not None:
                    raise exc  # a driver's error becomes a StorageError; others go on as they are
        finally:
            self.journal._lock.release()


def claim_slot(directory: Path) -> Journal:
    """The first spool file of ``directory`` no live process owns, now owned by this one
    (created, with the directory, if need be).

    Raises:
        StorageError: the directory cannot be made or written, or every slot is taken.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot make the spool directory {directory}: {exc}") from exc
    for number in range(MAX_SLOTS):
        journal = _try_slot(directory, number)
        if journal is not None:
            return journal
    raise StorageError(f"every spool file of {directory} is in use ({MAX_SLOTS})")


def orphans(directory: Path) -> Iterator[Journal]:
    """The spool files of ``directory`` that no live process owns and that hold rows, each
    now owned by this process (the caller closes them). Nothing when there is no directory."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("spool-*.db")):
        number = path.stem.removeprefix("spool-")
        if not number.isdigit():
            continue
        journal = _try_slot(directory, int(number), create=False)
        if journal is None:
            continue
        if len(journal):
            yield journal
        else:
            journal.close()


def _try_slot(directory: Path, number: int, *, create: bool = True) -> Journal | None:
    path = directory / f"spool-{number}.db"
    if not create and not path.exists():
        return None
    if fcntl is None:  # pragma: no cover
        return Journal(path)
    try:
        lock_file = os.open(directory / f"spool-{number}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StorageError(f"cannot write the spool directory {directory}: {exc}") from exc
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock_file)
        return None
    return Journal(path, lock_file)


def _spooled(row: tuple[object, ...]) -> Spooled:
    row_id, tenant, user, agent, thread, immediate, messages, correction, reinforcement = row
    turns = tuple(Message.from_dict(m, index=i) for i, m in enumerate(json.loads(str(messages))))
    scope = Scope(str(tenant), str(user), str(agent) if agent is not None else None)
    signals = Signals(bool(correction), bool(reinforcement))
    return Spooled(int(str(row_id)), Enqueued(scope, str(thread), turns, signals, bool(immediate)))
