"""MemoryService: the one object an agent framework needs (storage + queue + updater + worker).

    service = MemoryService(MemoryConfig.from_yaml("config.yaml"))
    service.after_agent(messages, thread_id="t1", user_id="u1", agent_name="coder")
    prompt = service.memory_context(user_id="u1", agent_name="coder") + prompt
    service.close()

The agent-facing methods (:meth:`~MemoryService.after_agent`,
:meth:`~MemoryService.before_summarization`, :meth:`~MemoryService.memory_context`) never raise
into the agent's turn: a problem (malformed messages, a bad name) is logged and counted in
:meth:`~MemoryService.status`, and the turn goes on without memory. A conversation the queue
cannot take because its database is down waits in a spool file on local disk, synced before
``after_agent`` returns True (:mod:`memory_sql.queue.spool`), until the database answers; a
process killed meanwhile leaves it for the next one. When the spool is full (or the tenant's
share of it), ``after_agent`` returns False and counts it (``spool_refused``): True always
means kept.

When the memory and the queue share a database (a SQL store), an update's save and the
completion of its queue row commit in one transaction: however a process dies, each queued
conversation takes effect once (a flush too long for one prompt, learned from part by part, is
at least once). With the JSON-file store the queue is a separate SQLite file, and an update
killed between its save and its completion runs again: at least once.

This module wires the stages together; what a stage offers through the service is the
stage's: conversations into the queue (:mod:`memory_sql.queue.conversations`), the queue's rows
and counts (:mod:`memory_sql.queue.commands`), the stored memory and its prompt block
(:mod:`memory_sql.recall.reading`), the update run (:mod:`memory_sql.update.run`) and its
embeddings (:class:`~memory_sql.update.embedding.SemanticParts`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy.engine import Engine

from . import pooling
from .config import MemoryConfig
from .errors import SpoolFullError
from .intake.guard import MemoryGuard
from .intake.redact import redactor_of
from .models import utcnow
from .pattern_files import load_patterns
from .queue import PendingUpdate, RunOutcome, Spool, UpdateQueue, UpdateWorker, spool_directory
from .queue.commands import QueueCommands
from .queue.conversations import ConversationQueueing
from .recall.context import Recall
from .recall.reading import MemoryReading
from .storage import MemoryStorage
from .storage.configured import open_configured, queue_engine_for
from .storage.writable import check_writable
from .update.embedding import SemanticParts
from .update.llm import LLMClient
from .update.run import WAITING_FOR_MODEL, UpdateRun, warn_if_lease_too_short
from .update.updater import UpdateResult

logger = logging.getLogger(__name__)


class MemoryService(ConversationQueueing, QueueCommands, MemoryReading):
    """Long-term memory for an agent: learn after each conversation, recall before the next.

    ``config`` defaults to :meth:`MemoryConfig.from_env`. ``storage`` defaults to what
    ``config.storage`` names; the queue lives in the same database (for the JSON-file store, in
    a SQLite file ``queue.db`` in its folder, migrated here). ``start=False`` builds everything
    but runs no updates (queued conversations wait for a service that starts); only the
    spool's retry thread runs, during an outage, to write what it keeps. ``on_result`` is
    called with every update's :class:`~memory_sql.UpdateResult`, in the worker's thread (the
    HTTP service's metrics count them); it must not raise.

    A SQL ``config.storage`` whose database is a new (or empty) SQLite file is brought to the
    newest schema here; a PostgreSQL database, or a SQLite file at an older revision, must
    be at head already (``memory-sql db upgrade``, :func:`memory_sql.upgrade`) unless
    ``config.auto_migrate`` (see :mod:`memory_sql.migrations`).

    Raises:
        SchemaOutOfDateError: the database is not at the schema head and is left as it is.
        StorageError: the database cannot be reached or written.
        ConfigError: a pattern file or the storage class is invalid.
    """

    def __init__(
        self,
        config: MemoryConfig | None = None,
        *,
        storage: MemoryStorage | None = None,
        llm: LLMClient | None = None,
        start: bool = True,
        on_result: Callable[[UpdateResult], None] | None = None,
    ) -> None:
        self.config = config = config if config is not None else MemoryConfig.from_env()
        self._patterns = load_patterns(config.patterns_dir)
        self._owned_engines: list[Engine] = []
        owned = self._owned_engines
        self._owns_storage = storage is None
        self.storage = storage if storage is not None else open_configured(config, owned)
        self.redactor = redactor_of(config)
        self.storage.write_guard = MemoryGuard(
            self.redactor, instructions=config.safety.refuse_instructions
        )
        queue_engine = queue_engine_for(self.storage, owned)
        pooling.set_listen_url(queue_engine, config.queue.listen_url)  # LISTEN past PgBouncer
        check_writable(queue_engine)
        self.queue = UpdateQueue(queue_engine, config.queue)
        self.update_run = UpdateRun.for_storage(
            config, self.storage, self.queue, llm=llm, on_result=on_result
        )
        self.updater, self.budget = self.update_run.updater, self.update_run.budget
        self.counter = self.update_run.counter
        # Semantic recall: facts get vectors after each update's save (docs/semantic-recall.md).
        self.semantic = SemanticParts(config, self.storage)
        self.embedder, self.vectors = self.semantic.embedder, self.semantic.vectors
        self.embedding = self.semantic.worker
        self.updater.dedupe = self.semantic.dedupe
        self.recall = Recall(
            config.recall, self.storage, self.counter, embedder=self.embedder, vectors=self.vectors
        )
        self.worker = UpdateWorker(
            self.queue,
            self._run,
            workers=config.queue.workers,
            sweep_interval=config.queue.sweep_interval_seconds,
        )
        self.spool = Spool(
            self.queue,
            directory=spool_directory(config.spool.directory, self.queue.engine.url)
            if config.spool.max_conversations
            else None,
            max_conversations=config.spool.max_conversations,
            max_per_tenant=config.spool.max_per_tenant,
            retry_seconds=config.spool.retry_seconds,
            on_queued=self.worker.notify,
        )
        warn_if_lease_too_short(config)
        self._problems = 0
        self._problems_lock = threading.Lock()
        self._closed = False
        self._warned_no_model = False
        if start:
            self._warn_if_no_model()
            self.worker.start()
            self.semantic.start()
            if config.retention.closed_fact_days > 0:
                self.worker.every(
                    config.retention.purge_interval_seconds, self.purge_closed, "purge"
                )

    # the agent's side ------------------------------------------------------------------------

    def after_agent(
        self,
        messages: Iterable[Any],
        *,
        thread_id: str,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
    ) -> bool:
        """Queue a finished conversation for a debounced memory update. Never raises.

        Filters the messages, needs at least one user and one assistant turn, detects
        correction / reinforcement, and queues the conversation for its key (tenant, user,
        agent, thread), or spools it on disk while the database is down. Returns True if the
        conversation was queued or spooled (it is kept); False when there was nothing to learn
        or it was refused: malformed messages, text that is not valid Unicode, a bad name
        (logged and counted as a problem), or the database away and the spool full (counted
        in ``spool_refused``; the caller may send it again).
        """
        return self._enqueue(messages, thread_id, user_id, agent_name, tenant_id, immediate=False)

    def before_summarization(
        self,
        messages: Iterable[Any],
        *,
        thread_id: str,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
    ) -> bool:
        """Queue messages that summarization is about to drop, due now. Never raises."""
        return self._enqueue(messages, thread_id, user_id, agent_name, tenant_id, immediate=True)

    def purge_closed(self) -> int:
        """Delete the closed facts older than ``closed_fact_retention_days`` (0: none); what
        the worker runs every ``purge_interval_seconds``. Returns how many; never raises (a
        failure is logged, and the next run tries again)."""
        days = self.config.retention.closed_fact_days
        if days <= 0:
            return 0
        try:
            purged = self.storage.purge_closed(utcnow() - timedelta(days=days))
        except Exception:
            self._problem("memory_sql: cannot purge closed facts")
            return 0
        if purged:
            logger.info("memory_sql: purged %d closed facts older than %d days", purged, days)
        return purged

    # operating it ----------------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Write what is spooled, then run every pending update now; True if none is left
        pending (nor spooled) within ``timeout``.

        Raises:
            StorageError: the queue's database cannot be read or written.
        """
        self._warn_if_no_model()
        self.spool.write()
        started = time.monotonic()
        done = self.worker.flush(timeout) and self.semantic.wait_idle(  # the vectors too
            lambda: self.worker.in_flight, max(timeout - (time.monotonic() - started), 0.0)
        )
        return done and len(self.spool) == 0

    def rejections(self) -> dict[str, int]:
        """The parts of the memory LLM's replies refused here since start, by reason
        (:mod:`memory_sql.update.rejections`), most frequent first."""
        return self.update_run.rejections()

    def status(self) -> dict[str, int]:
        """The queue's counts (:meth:`queue_status`: ``pending``, ``failed``, ``leased``,
        ``in_flight``, ``completed``, ``failed_runs``, ``postponed``, ``spooled``,
        ``spool_refused``, ``trimmed_messages``), ``over_budget`` (updates held back here since
        start, their tenant's daily LLM budget used up: they wait), ``problems`` (hook calls
        that were logged instead of raising), and ``llm_calls`` / ``prompt_tokens`` /
        ``completion_tokens`` (the memory LLM's calls here since start, failed ones too: the
        numbers of the usage rows), ``rejected_items`` (parts of the LLM's replies refused here
        since start: dropped by the parser, kept out by the scope gate, removals of unknown ids;
        by reason in :meth:`rejections`), and with embeddings the embedder's counters.

        Raises:
            StorageError: the queue's database cannot be read.
        """
        return {
            **self.queue_status(),
            "over_budget": self.budget.refused,
            "problems": self._problems,
            **self.update_run.usage,
            **self.semantic.stats(),
        }

    def close(self, timeout: float = 30.0) -> bool:
        """Stop scheduling; wait up to ``timeout`` for updates in flight; leave the rest queued
        for the next start. True if nothing was still running; else the runs still going keep
        the LLM client and database connections they use, and finish in the background."""
        if self._closed:
            return True
        self._closed = True
        self.spool.close()
        self.recall.close()
        self.semantic.stop(min(timeout, 5.0))
        finished = self.worker.stop(timeout)
        if not finished:
            logger.warning("memory_sql: closed with updates still running; they finish alone")
            return False
        self.updater.close()
        self.semantic.close()
        if self._owns_storage:
            self.storage.close()
        for engine in self._owned_engines:
            engine.dispose()
        return finished

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def on_result(self) -> Callable[[UpdateResult], None] | None:
        """What every update's :class:`~memory_sql.UpdateResult` is handed to (the
        constructor's ``on_result``)."""
        return self.update_run.on_result

    @on_result.setter
    def on_result(self, callback: Callable[[UpdateResult], None] | None) -> None:
        self.update_run.on_result = callback

    # internals -------------------------------------------------------------------------------

    def _enqueue(
        self,
        messages: Iterable[Any],
        thread_id: str,
        user_id: str | None,
        agent_name: str | None,
        tenant_id: str | None,
        *,
        immediate: bool,
    ) -> bool:
        try:
            return self.queue_conversation(
                messages,
                thread_id=thread_id,
                user_id=user_id,
                agent_name=agent_name,
                tenant_id=tenant_id,
                immediate=immediate,
            )
        except SpoolFullError as exc:
            self.spool.log_refusal(thread_id, user_id, exc)
            return False
        except Exception:
            self._problem(
                "memory_sql: cannot queue thread %r of user %r for memory", thread_id, user_id
            )
            return False

    def _run(self, item: PendingUpdate) -> RunOutcome:
        """What the worker runs for each row: :class:`~memory_sql.update.run.UpdateRun` (a
        subclass may wrap it: the DeerFlow backend sets its host's context around it). A
        saved update's new facts are then embedded (with embeddings), outside its transaction."""
        outcome = self.update_run(item)
        if outcome.ok:
            self.semantic.saved(item.scope)
        return outcome

    @property
    def waiting_for_model(self) -> str | None:
        """Why updates wait (no memory LLM model configured), or None when they can run."""
        return self.update_run.waiting_for_model if self.config.enabled else None

    def _warn_if_no_model(self) -> None:
        """Say once, when updates are about to run, that there is no model to run them."""
        if not self._warned_no_model and self.waiting_for_model:
            self._warned_no_model = True
            logger.warning("memory_sql: %s", WAITING_FOR_MODEL)

    def _problem(self, message: str, *args: object) -> None:
        with self._problems_lock:
            self._problems += 1
        logger.warning(message, *args, exc_info=True)
