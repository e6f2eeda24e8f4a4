"""What every request of one process shares: :class:`ServerState`, and ``State`` for routes.

One process holds one state: an engine whose PostgreSQL connections see no tenant unless the
work acts for one (a request for its key's, the queue for all; :mod:`memory_sql.tenancy`), the
SQL storage, the :class:`~memory_sql.MemoryService` (its worker runs here with
``with_worker``), the key checker and the metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.engine import Engine

from .. import migrations
from ..config import MemoryConfig
from ..database import create_engine
from ..errors import ConfigError
from ..service import MemoryService
from ..storage import SQLStorage
from ..storage.grants import role_bypassing_row_security
from ..tenancy import NO_TENANT
from .keys import KeyChecker
from .metrics import Metrics
from .reads import PRIMARY, Reads, ReadTarget

logger = logging.getLogger("memory_sql.server")


@dataclass
class ServerState:
    """What every request of one process shares."""

    config: MemoryConfig
    engine: Engine
    storage: SQLStorage
    service: MemoryService
    keys: KeyChecker
    metrics: Metrics
    head_revision: str
    updates_here: bool = True  # this process runs the updates (serve --with-worker)
    reads: Reads | None = None  # the read replica's and the primary's (docs/replication.md)

    @property
    def reading(self) -> Reads:
        """Where reads go: the replica within its lag bound, else the primary."""
        if self.reads is None:
            primary = ReadTarget(PRIMARY, self.engine, self.storage, self.service.recall)
            self.reads = Reads(primary, self.metrics)
        return self.reads

    @property
    def waiting_for_model(self) -> str | None:
        """Why this process's updates wait (no memory LLM model configured; issue 34), or
        None. A process without the worker cannot tell: the worker reads its own config."""
        return self.service.waiting_for_model if self.updates_here else None

    @classmethod
    def open(cls, config: MemoryConfig, metrics: Metrics, *, with_worker: bool) -> ServerState:
        """Connect, check the schema, and start the service (its worker with ``with_worker``).

        Raises:
            ConfigError: the storage is not a SQL database.
            SchemaOutOfDateError, StorageError: the database is not ready.
        """
        engine = _ready_engine(config)
        try:
            storage = SQLStorage(engine)
            service = MemoryService(
                config, storage=storage, start=with_worker, on_result=metrics.observe_update
            )
        except BaseException:
            engine.dispose()
            raise
        metrics.watch(service)
        _warn_if_row_security_is_bypassed(engine)
        primary = ReadTarget(PRIMARY, engine, storage, service.recall)
        try:
            reads = Reads.open(
                config, primary, metrics, pool_size=max(10, config.queue.workers + 8)
            )
        except BaseException:
            service.close()
            engine.dispose()
            raise
        return cls(
            config,
            engine,
            storage,
            service,
            KeyChecker(engine),
            metrics,
            migrations.head_revision(),
            with_worker,
            reads,
        )

    @staticmethod
    def check(config: MemoryConfig) -> None:
        """Raise now what :meth:`open` would raise for ``config``'s database (``memory-sql
        serve`` says it in one line before it starts serving)."""
        _ready_engine(config).dispose()

    def close(self) -> None:
        if self.reads is not None:
            self.reads.close()
        self.service.close()
        self.storage.close()
        self.engine.dispose()


def _ready_engine(config: MemoryConfig) -> Engine:
    """The service's engine for ``config.storage``, its schema at head (see
    :func:`memory_sql.migrations.prepare_schema`)."""
    if config.storage_class or "://" not in config.storage:
        raise ConfigError(
            "the HTTP service needs a SQL database as storage (sqlite:///… or "
            f"postgresql+psycopg://…), not {config.storage!r}",
            key="storage",
        )
    engine = create_engine(
        config.storage,
        tenant_default=NO_TENANT,
        pool_size=max(10, config.queue.workers + 8),
        prepare_threshold=config.database.prepare_threshold,
    )
    try:
        migrations.prepare_schema(engine, auto_migrate=config.auto_migrate)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _warn_if_row_security_is_bypassed(engine: Engine) -> None:
    """Say so when the service connects to PostgreSQL as a role row-level security does not
    hold (a superuser, BYPASSRLS): isolation then rests on the queries' filters alone."""
    role = role_bypassing_row_security(engine)
    if role is not None:
        logger.warning(
            "memory_sql service: role %s bypasses row-level security (a superuser or "
            "BYPASSRLS); connect as a role of its own (memory-sql db grant --role …)",
            role,
        )


async def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.memory
    return state


State = Annotated[ServerState, Depends(_state)]
"""A route's handle on the :class:`ServerState`."""
