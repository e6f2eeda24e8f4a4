"""Where the service's reads go: a read replica within its lag bound, else the primary
(docs/replication.md).

A route passes its read as a function of a :class:`ReadTarget` (the engine, storage and recall
to read with) to :meth:`Reads.read`. Without a replica configured every read is the primary's.
With one, the read runs on the replica when :class:`~memory_sql.storage.replicas.ReadReplica`
allows it; it runs again on the primary when the replica fails, or when the reader holds a
newer version (``min_version``) than the replica returned, or the replica has not got the
memory yet (404). Reads and fallbacks are counted in the metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.engine import Engine

from ..config import MemoryConfig
from ..database import create_engine
from ..driver_errors import DATABASE_ERRORS
from ..errors import StorageError
from ..recall.context import Recall
from ..storage import SQLStorage
from ..storage.replicas import ERROR, PRIMARY, REPLICA, VERSION, ReadReplica, ReplicaStorage
from ..tenancy import NO_TENANT
from .errors import ApiError
from .metrics import Metrics

R = TypeVar("R")
_REPLICA_FAILURES: tuple[type[Exception], ...] = (StorageError, *DATABASE_ERRORS)


@dataclass(frozen=True)
class ReadTarget:
    """A database to read from: its name (``primary`` or ``replica``), engine, storage, and
    the recall that ranks facts with its full-text index."""

    name: str
    engine: Engine
    storage: SQLStorage
    recall: Recall


class Reads:
    """The primary, and the replica when there is one (see the module's docstring)."""

    def __init__(
        self,
        primary: ReadTarget,
        metrics: Metrics,
        replica: ReadTarget | None = None,
        chooser: ReadReplica | None = None,
    ) -> None:
        self.primary = primary
        self.replica = replica
        self.chooser = chooser
        self.metrics = metrics

    @classmethod
    def open(
        cls, config: MemoryConfig, primary: ReadTarget, metrics: Metrics, *, pool_size: int
    ) -> Reads:
        """The reads of ``config``: the replica of ``config.replicas.url`` (not connected
        yet: a replica down at start is only read once it answers), else the primary only."""
        settings = config.replicas
        if settings.url is None:
            return cls(primary, metrics)
        engine = create_engine(
            settings.url,
            tenant_default=NO_TENANT,
            pool_size=pool_size,
            prepare_threshold=config.database.prepare_threshold,
        )
        storage = ReplicaStorage(engine, primary.storage)
        service_recall = primary.recall
        recall = Recall(
            service_recall.settings,
            storage,
            service_recall.counter,
            embedder=service_recall.embedder,
            vectors=service_recall.vectors,
        )
        recall.terms = service_recall.terms  # one in-process index of each memory, by version
        chooser = ReadReplica(
            primary.engine,
            engine,
            max_lag_seconds=settings.max_lag_seconds,
            lag_check_seconds=settings.lag_check_seconds,
            on_fallback=lambda reason: metrics.replica_fallbacks.labels(reason).inc(),
            on_lag=metrics.replica_lag.set,
        )
        return cls(primary, metrics, ReadTarget(REPLICA, engine, storage, recall), chooser)

    def read(
        self,
        call: Callable[[ReadTarget], R],
        *,
        min_version: int | None = None,
        version_of: Callable[[R], int | None] | None = None,
    ) -> R:
        """``call`` on the replica when it may serve it, else (or when it cannot) on the
        primary. With ``min_version``, a replica result whose ``version_of`` is older, or a
        404 from the replica, is read again on the primary; without ``version_of`` such a
        read goes to the primary at once."""
        if self.replica is None or self.chooser is None:
            return self._on(self.primary, call)
        if min_version is not None and version_of is None:
            self.chooser.fallback(VERSION)
            return self._on(self.primary, call)
        if self.chooser.choose().target != REPLICA:
            return self._on(self.primary, call)
        try:
            result = call(self.replica)
        except ApiError as exc:
            if exc.status != 404 or min_version is None:
                self.metrics.reads.labels(REPLICA).inc()
                raise
            self.chooser.fallback(VERSION)
            return self._on(self.primary, call)
        except _REPLICA_FAILURES as exc:
            self.chooser.failed(exc)
            return self._on(self.primary, call)
        if min_version is not None and version_of is not None:
            version = version_of(result)
            if version is None or version < min_version:
                self.chooser.fallback(VERSION)
                return self._on(self.primary, call)
        self.metrics.reads.labels(REPLICA).inc()
        return result

    def _on(self, target: ReadTarget, call: Callable[[ReadTarget], R]) -> R:
        self.metrics.reads.labels(PRIMARY).inc()
        return call(target)

    def close(self) -> None:
        if self.replica is not None:
            self.replica.recall.close()
            self.replica.storage.close()
            self.replica.engine.dispose()


__all__ = ["ERROR", "PRIMARY", "REPLICA", "ReadTarget", "Reads"]
