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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from .config import MemoryConfig
from .embeddings import Embedder
from .errors import SpoolFullError
from .intake import KeptConversation, take_conversation
from .intake.guard import MemoryGuard
from .intake.redact import count_redactions, redactor_of
from .models import MemoryDocument, utcnow
from .pattern_files import load_patterns
from .queue import (
    PendingUpdate,
    RunOutcome,
    Spool,
    UpdateQueue,
    UpdateWorker,
    manage,
    spool_directory,
)
from .queue.manage import QueueChange, QueuedUpdate, UpdateKey
from .recall.context import Recall
from .scope import Scope, check_thread_id
from .storage import MemoryStorage, SQLStorage
from .storage.configured import open_configured, queue_engine_for
from .storage.redactions import record_redactions
from .storage.vectors import FactVectors
from .storage.writable import check_writable
from .tenancy import acting_for
from .tokens import make_token_counter
from .update.budget import LLMBudget
from .update.dedupe import SemanticDedupe
from .update.embedding import EmbeddingPass, EmbeddingWorker
from .update.llm import LLMClient
from .update.run import WAITING_FOR_MODEL, UpdateRun, warn_if_lease_too_short
from .update.updater import MemoryUpdater, UpdateResult

logger = logging.getLogger(__name__)
_refusals = logging.getLogger("memory_sql.spool.refused")


class MemoryService:
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
        self.config = config if config is not None else MemoryConfig.from_env()
        self._patterns = load_patterns(self.config.patterns_dir)
        self._owned_engines: list[Engine] = []
        self._owns_storage = storage is None
        self.storage = (
            storage if storage is not None else open_configured(self.config, self._owned_engines)
        )
        self.redactor = redactor_of(self.config)
        self.storage.write_guard = MemoryGuard(
            self.redactor, instructions=self.config.safety.refuse_instructions
        )
        queue_engine = queue_engine_for(self.storage, self._owned_engines)
        check_writable(queue_engine)
        self.queue = UpdateQueue(queue_engine, self.config.queue)
        self.updater = MemoryUpdater(self.config, self.storage, llm)
        self.budget = LLMBudget(
            self.storage.engine if isinstance(self.storage, SQLStorage) else None,
            daily_calls=self.config.llm.daily_calls_per_tenant,
            daily_tokens=self.config.llm.daily_tokens_per_tenant,
        )
        self.counter = make_token_counter(
            self.config.tokens.counting, self.config.tokens.encoding_file
        )
        self.update_run = UpdateRun(
            queue=self.queue,
            updater=self.updater,
            budget=self.budget,
            counter=self.counter,
            # The save of an update completes its queue row in the same transaction.
            completes_in_save=isinstance(self.storage, SQLStorage)
            and self.storage.engine is self.queue.engine,
            on_result=on_result,
        )
        # Semantic recall: facts get vectors after each update's save (docs/semantic-recall.md).
        self.embedder = Embedder.from_config(self.config)
        self.vectors = (
            FactVectors(self.storage.engine, self.embedder.key)
            if self.embedder is not None and isinstance(self.storage, SQLStorage)
            else None
        )
        self.embedding = (
            EmbeddingWorker(
                EmbeddingPass(self.embedder, self.vectors),
                interval_seconds=self.config.embedding.interval_seconds,
                retry_seconds=self.config.embedding.retry_seconds,
            )
            if self.embedder is not None and self.vectors is not None
            else None
        )
        self.recall = Recall(
            self.config.recall,
            self.storage,
            self.counter,
            embedder=self.embedder,
            vectors=self.vectors,
        )
        if self.embedder is not None and self.vectors is not None:
            self.updater.dedupe = SemanticDedupe(
                self.embedder, self.vectors, self.config.update.dedupe_cosine
            )
        self.worker = UpdateWorker(
            self.queue,
            self._run,
            workers=self.config.queue.workers,
            sweep_interval=self.config.queue.sweep_interval_seconds,
        )
        self.spool = Spool(
            self.queue,
            directory=spool_directory(self.config.spool.directory, self.queue.engine.url)
            if self.config.spool.max_conversations
            else None,
            max_conversations=self.config.spool.max_conversations,
            max_per_tenant=self.config.spool.max_per_tenant,
            retry_seconds=self.config.spool.retry_seconds,
            on_queued=self.worker.notify,
        )
        warn_if_lease_too_short(self.config)
        self._problems = 0
        self._problems_lock = threading.Lock()
        self._closed = False
        self._warned_no_model = False
        if start:
            self._warn_if_no_model()
            self.worker.start()
            if self.embedding is not None:
                self.embedding.start()
            if self.config.retention.closed_fact_days > 0:
                self.worker.every(
                    self.config.retention.purge_interval_seconds, self.purge_closed, "purge"
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

    def queue_conversation(
        self,
        messages: Iterable[Any],
        *,
        thread_id: str,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        immediate: bool = False,
    ) -> bool:
        """What :meth:`after_agent` (``immediate``: :meth:`before_summarization`) does, for a
        caller that wants bad input raised rather than logged (the HTTP service).

        Returns True if the conversation was queued or spooled, False if memory is off or the
        filtered conversation has no user and assistant turn to learn from.

        Raises:
            InvalidScopeError: a name or ``thread_id`` is malformed.
            InvalidMessageError: a message is malformed or its text is not valid Unicode.
            SpoolFullError: the database is unavailable and the spool cannot take it (full,
                or the tenant's share full): nothing was kept, send it again later.
        """
        if not self.config.enabled:
            return False
        return self.queue_kept(
            self.take_conversation(messages),
            thread_id=thread_id,
            user_id=user_id,
            agent_name=agent_name,
            tenant_id=tenant_id,
            immediate=immediate,
        )

    def take_conversation(self, messages: Iterable[Any]) -> KeptConversation:
        """``messages`` through intake with this service's patterns: the kept turns and their
        signals, as the queue would store them (see :meth:`queue_kept`).

        Raises:
            InvalidMessageError: a message is malformed or its text is not valid Unicode.
        """
        return take_conversation(messages, patterns=self._patterns, redactor=self.redactor)

    def queue_kept(
        self,
        kept: KeptConversation,
        *,
        thread_id: str,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        immediate: bool = False,
    ) -> bool:
        """:meth:`queue_conversation` of a conversation already taken in
        (:meth:`take_conversation`), for a caller that looked at it first (the CLI).

        Raises:
            InvalidScopeError: a name or ``thread_id`` is malformed.
            SpoolFullError: as :meth:`queue_conversation`.
        """
        if not self.config.enabled:
            return False
        scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
        check_thread_id(thread_id)
        if kept.redactions:
            self._count_intake_redactions(scope.tenant_id, kept.redactions)
        if not kept.learnable:
            return False
        return self.spool.add(scope, thread_id, kept.turns, kept.signals, immediate=immediate)

    def load(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        as_of: datetime | None = None,
    ) -> MemoryDocument:
        """The stored memory of a scope (:meth:`MemoryStorage.load
        <memory_sql.storage.MemoryStorage.load>`); ``as_of``: the facts believed then.

        Raises:
            InvalidScopeError: a scope argument is malformed.
            StorageError: the storage could not be read.
        """
        scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
        with acting_for(scope.tenant_id):
            return self.storage.load(**scope.arguments(), as_of=as_of)

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

    def memory_context(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        today: date | None = None,
        query: str | Iterable[Any] | None = None,
    ) -> str:
        """The memory block for the system prompt (a date reminder and ``<user_memory>``), or
        ``""`` when there is nothing to show or memory is off or failing. Never raises.

        ``query``, the turn about to be answered (a string) or the conversation so far
        (messages; its last user turns are used), chooses the facts by relevance to it
        (:mod:`memory_sql.recall.ranking`); without one, by category and confidence.
        """
        if not self.config.enabled:
            return ""
        try:
            scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
            doc = self.storage.load(**scope.arguments())
            return self.recall.render(doc, scope, query=query, today=today)
        except Exception:
            self._problem(
                "memory_sql: cannot read the memory of user %r, agent %r", user_id, agent_name
            )
            return ""

    def render_context(
        self,
        doc: MemoryDocument,
        *,
        today: date | None = None,
        scope: Scope | None = None,
        query: str | Iterable[Any] | None = None,
    ) -> str:
        """``doc`` as :meth:`memory_context` renders it, with this service's token budget and
        guaranteed categories (``""`` when memory is off), for a caller that loaded it (the
        memory of ``scope``, needed with a ``query``).

        Raises:
            InvalidMessageError: ``query`` holds a malformed message.
            StorageError: the full-text index could not be read.
        """
        if not self.config.enabled:
            return ""
        if query is not None and scope is None:
            raise ValueError("render_context: a query needs the memory's scope")
        return self.recall.render(doc, scope or Scope.of(), query=query, today=today)

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
        done = self.worker.flush(timeout)
        if self.embedding is not None and done:  # the saved facts' vectors too
            # A run completes its row in its save's transaction and asks for its vectors just
            # after: the runs still finishing come first.
            while self.worker.in_flight and time.monotonic() - started < timeout:
                time.sleep(0.01)
            done = self.embedding.wait_idle(max(timeout - (time.monotonic() - started), 0.0))
        return done and len(self.spool) == 0

    def rejections(self) -> dict[str, int]:
        """The parts of the memory LLM's replies refused here since start, by reason
        (:mod:`memory_sql.update.rejections`), most frequent first."""
        return self.update_run.rejections()

    def status(self) -> dict[str, int]:
        """``pending`` and ``failed`` rows in the queue (all processes), ``leased`` (running
        anywhere), ``in_flight`` (running here), ``completed`` / ``failed_runs`` /
        ``postponed`` (runs here since start; postponed: lost to version conflicts, run again),
        ``spooled`` (conversations waiting in this process's spool file for the database),
        ``spool_refused`` (conversations not taken since start, the database away and the
        spool full: ``after_agent`` said False, the service 503), ``trimmed_messages``
        (cut oldest first from queue rows over ``queue_max_row_messages`` or
        ``queue_max_row_bytes`` since start), ``over_budget`` (updates held back here since
        start, their tenant's daily LLM budget used up: they wait), ``problems`` (hook calls
        that were logged instead of raising), and ``llm_calls`` / ``prompt_tokens`` /
        ``completion_tokens`` (the memory LLM's calls here since start, failed ones too: the
        numbers of the usage rows), ``rejected_items`` (parts of the LLM's replies refused here
        since start: dropped by the parser, kept out by the scope gate, removals of unknown ids;
        by reason in :meth:`rejections`).

        Raises:
            StorageError: the queue's database cannot be read.
        """
        counts = self.queue.counts()
        return {
            "pending": counts["pending"],
            "failed": counts["failed"],
            "leased": counts["leased"],
            "in_flight": self.worker.in_flight,
            "completed": self.worker.completed,
            "failed_runs": self.worker.failed,
            "postponed": self.worker.postponed,
            "spooled": len(self.spool),
            "spool_refused": self.spool.refused,
            "trimmed_messages": self.queue.trimmed_messages,
            "over_budget": self.budget.refused,
            "problems": self._problems,
            **self.update_run.usage,
            **(self.embedder.stats.snapshot() if self.embedder is not None else {}),
        }

    # the queue, by hand ----------------------------------------------------------------------

    def pending_updates(
        self,
        *,
        failed_only: bool = False,
        tenant_id: str | None = None,
        user_id: str | None = None,
        agent_name: str | None = None,
        limit: int | None = None,
    ) -> list[QueuedUpdate]:
        """The queue's rows (every process's): :func:`memory_sql.queue.manage.list_updates`.
        Each has its ``key``, for :meth:`retry_failed` and :meth:`drop_updates`."""
        return manage.list_updates(
            self.queue.engine,
            failed_only=failed_only,
            tenant_id=tenant_id,
            user_id=user_id,
            agent_name=agent_name,
            limit=limit,
        )

    def retry_failed(self, keys: Iterable[str | UpdateKey] | None = None) -> QueueChange:
        """Run the rows ``keys`` name (every ``failed`` row if None) again, due now:
        :func:`memory_sql.queue.manage.retry_updates`; a started worker runs them at once."""
        change = manage.retry_updates(self.queue.engine, keys)
        if change.changed:
            self.worker.notify(utcnow())
        return change

    def drop_updates(self, keys: Iterable[str | UpdateKey] | None = None) -> QueueChange:
        """Delete the rows ``keys`` name (every ``failed`` row if None), unlearned:
        :func:`memory_sql.queue.manage.drop_updates`."""
        return manage.drop_updates(self.queue.engine, keys)

    def close(self, timeout: float = 30.0) -> bool:
        """Stop scheduling; wait up to ``timeout`` for updates in flight; leave the rest queued
        for the next start. True if nothing was still running; else the runs still going keep
        the LLM client and database connections they use, and finish in the background."""
        if self._closed:
            return True
        self._closed = True
        self.spool.close()
        self.recall.close()
        if self.embedding is not None:
            self.embedding.stop(min(timeout, 5.0))
        finished = self.worker.stop(timeout)
        if not finished:
            logger.warning("memory_sql: closed with updates still running; they finish alone")
            return False
        self.updater.close()
        if self.embedder is not None:
            self.embedder.close()
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
            refused = self.spool.refused
            if refused & (refused - 1) == 0:  # the 1st, 2nd, 4th, 8th…: not one line each
                _refusals.warning(
                    "memory_sql: thread %r of user %r not kept (%d refused since start): %s",
                    thread_id,
                    user_id,
                    refused,
                    exc,
                )
            return False
        except Exception:
            self._problem(
                "memory_sql: cannot queue thread %r of user %r for memory", thread_id, user_id
            )
            return False

    def _count_intake_redactions(self, tenant_id: str, counts: dict[str, int]) -> None:
        """Count what intake redacted, in this process (metrics) and in ``memory_redactions``;
        a database away loses the count, never the conversation (logged, without the text)."""
        count_redactions(tenant_id, counts)
        try:
            with acting_for(tenant_id), self.queue.engine.begin() as conn:
                record_redactions(conn, tenant_id, "intake", counts)
        except Exception as exc:
            logger.warning(
                "memory_sql: redaction counts of tenant %r not recorded (%s)",
                tenant_id,
                type(exc).__name__,
            )

    def _run(self, item: PendingUpdate) -> RunOutcome:
        """What the worker runs for each row: :class:`~memory_sql.update.run.UpdateRun` (a
        subclass may wrap it: the DeerFlow backend sets its host's context around it). A
        saved update's new facts are then embedded (with embeddings), outside its transaction."""
        outcome = self.update_run(item)
        if outcome.ok and self.embedding is not None:
            self.embedding.request(item.scope)
        return outcome

    @property
    def waiting_for_model(self) -> str | None:
        """Why updates wait (no memory LLM model configured), or None when they can run."""
        if not self.config.enabled or self.updater.llm.model:
            return None
        return WAITING_FOR_MODEL

    def _warn_if_no_model(self) -> None:
        """Say once, when updates are about to run, that there is no model to run them."""
        if self._warned_no_model or self.updater.llm.model or not self.config.enabled:
            return
        self._warned_no_model = True
        logger.warning("memory_sql: %s", WAITING_FOR_MODEL)

    def _problem(self, message: str, *args: object) -> None:
        with self._problems_lock:
            self._problems += 1
        logger.warning(message, *args, exc_info=True)
