"""Reads from a replica with bounded staleness (docs/replication.md).

:class:`ReadReplica` decides, read by read, whether a streaming standby may serve it: it may
while its replay lag, measured at most every ``lag_check_seconds`` and cached in between, is
within ``max_lag_seconds``; otherwise, and after a replica read failed, the primary serves.
The lag is measured against the primary's own write position (one small query on each side),
so a standby cut off from its primary is not taken for current because it replayed all it
received. A reader holding a version the API returned (the caller checks it against what the
replica read, :meth:`ReadReplica.fallback` then) is served by the primary when the replica is
older.

The replica's storage (:class:`ReplicaStorage`) reads like the primary's and sends what a read
records (the access heat of facts shown) to the primary.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import redacted
from ..scope import Scope
from ..tenancy import ALL_TENANTS, acting_for
from .dialects import dialect_of
from .sql import SQLStorage

logger = logging.getLogger(__name__)

PRIMARY = "primary"
REPLICA = "replica"

LAG = "lag"
"""A fallback's reason: the replica's replay lag is beyond the bound."""
VERSION = "version"
"""A fallback's reason: the replica has not replayed the version the reader holds."""
ERROR = "error"
"""A fallback's reason: the replica failed (or its lag could not be measured)."""


class ReplicaStorage(SQLStorage):
    """The SQL storage of a read replica: loads and searches there; the access heat that
    reads record goes to ``primary`` (a standby takes no writes)."""

    def __init__(self, engine: Engine, primary: SQLStorage) -> None:
        super().__init__(engine, check_schema=False)
        self.primary = primary

    def record_access(self, counts: Mapping[tuple[Scope, str], tuple[int, datetime]]) -> None:
        self.primary.record_access(counts)


@dataclass(frozen=True)
class Choice:
    """Where one read goes: :data:`REPLICA` or :data:`PRIMARY`, and why not the replica
    (:data:`LAG` or :data:`ERROR`; None when it was not asked, or is used)."""

    target: str
    reason: str | None = None


class ReadReplica:
    """Chooses the replica or the primary for each read (see the module's docstring).

    ``on_fallback(reason)`` is called for each read sent to the primary instead of the
    replica; ``on_lag(seconds)`` with each measured lag. Safe to share between threads: one
    thread measures while the others use the cached value.
    """

    def __init__(
        self,
        primary: Engine,
        replica: Engine,
        *,
        max_lag_seconds: float,
        lag_check_seconds: float,
        on_fallback: Callable[[str], None] | None = None,
        on_lag: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.replica = replica
        self.max_lag_seconds = max_lag_seconds
        self.lag_check_seconds = lag_check_seconds
        self._on_fallback = on_fallback
        self._on_lag = on_lag
        self._clock = clock
        self._lock = threading.Lock()
        self._lag: float | None = None  # None: unknown, or the replica failed
        self._checked = -math.inf
        self._failed_reported = False
        dialect = dialect_of(replica)
        self._position_sql = dialect.replay_position_sql
        self._lag_sql = (
            None
            if dialect.replica_lag_sql is None
            else sa.text(dialect.driver_sql(dialect.replica_lag_sql))
        )

    def __repr__(self) -> str:
        return f"ReadReplica({redacted(self.replica.url)!r}, lag={self._lag})"

    @property
    def lag(self) -> float | None:
        """The replay lag last measured (seconds), None when unknown or unmeasurable."""
        return self._lag

    def choose(self) -> Choice:
        """Where the next read goes."""
        if self._clock() - self._checked >= self.lag_check_seconds and self._lock.acquire(
            blocking=False
        ):
            try:
                self._measure()
            finally:
                self._lock.release()
        lag = self._lag
        if lag is None:
            return self._fallback(ERROR)
        if lag > self.max_lag_seconds:
            return self._fallback(LAG)
        return Choice(REPLICA)

    def fallback(self, reason: str) -> Choice:
        """A read the replica was chosen for goes to the primary after all (``reason``)."""
        return self._fallback(reason)

    def failed(self, exc: BaseException) -> Choice:
        """A replica read failed: the primary serves until the lag is measured again."""
        # Not under the measuring lock: a read must not wait on a measurement of a replica
        # that may hang. One running now may overwrite this; the next failed read says it again.
        self._lag = None
        self._checked = self._clock()
        self._report_failure(exc)
        return self._fallback(ERROR)

    def _fallback(self, reason: str) -> Choice:
        if self._on_fallback is not None:
            self._on_fallback(reason)
        return Choice(PRIMARY, reason)

    def _measure(self) -> None:
        try:
            lag = self.measure_lag()
        except Exception as exc:  # the replica is down or unreachable: read the primary
            self._lag = None
            self._report_failure(exc)
        else:
            if self._lag is None and self._failed_reported:
                logger.warning("read replica %s answers again", redacted(self.replica.url))
                self._failed_reported = False
            self._lag = lag
            if self._on_lag is not None:
                self._on_lag(lag)
        self._checked = self._clock()

    def measure_lag(self) -> float:
        """The replica's replay lag in seconds, measured now (0 for a database that has no
        replicas, or a "replica" that is itself a primary).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the replica could not be read.
        """
        if self._lag_sql is None or self._position_sql is None:
            return 0.0
        position: str | None
        try:
            with acting_for(ALL_TENANTS), self.primary.connect() as conn:
                position = conn.exec_driver_sql(self._position_sql).scalar()
        except Exception as exc:  # no primary: measure against what the replica received
            logger.debug("primary's write position unread (%s): the replica's own is used", exc)
            position = None
        with acting_for(ALL_TENANTS), self.replica.connect() as conn:
            lag = conn.execute(self._lag_sql, {"primary": position}).scalar()
        value = float(lag if lag is not None else math.inf)
        return max(0.0, value)

    def _report_failure(self, exc: BaseException) -> None:
        if not self._failed_reported:
            self._failed_reported = True
            logger.warning(
                "read replica %s unavailable, reading the primary: %s",
                redacted(self.replica.url),
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            )
