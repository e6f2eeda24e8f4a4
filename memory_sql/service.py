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

import hashlib
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from . import migrations
from .config import MemoryConfig
from .database import create_engine
from .errors import LeaseLostError, MemorySQLError, SpoolFullError
from .intake import KeptConversation, take_conversation
from .models import MemoryDocument, utcnow
from .pattern_files import load_patterns
from .queue import PendingUpdate, RunOutcome, Spool, UpdateQueue, UpdateWorker, manage
from .queue.manage import QueueChange, QueuedUpdate, UpdateKey
from .recall.context import Recall
from .scope import Scope, check_thread_id
from .storage import FileStorage, MemoryStorage, SQLStorage, load_storage_class
from .storage.writable import check_writable
from .tenancy import acting_for
from .tokens import make_token_counter
from .update import watermark
from .update.budget import LLMBudget
from .update.llm import LLMClient
from .update.parser import MemoryUpdate
from .update.prompt import split_conversation
from .update.updater import MemoryUpdater, UpdateResult

logger = logging.getLogger(__name__)
_refusals = logging.getLogger("memory_sql.spool.refused")

QUEUE_FILE = "queue.db"


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
        self.storage = storage if storage is not None else self._open_storage()
        queue_engine = self._queue_engine()
        check_writable(queue_engine)
        self.queue = UpdateQueue(
            queue_engine,
            debounce_seconds=self.config.debounce_seconds,
            max_debounce_seconds=self.config.max_debounce_seconds,
            lease_seconds=self.config.lease_seconds,
            max_attempts=self.config.max_attempts,
            retry_backoff_seconds=self.config.retry_backoff_seconds,
            max_row_messages=self.config.queue_max_row_messages,
            max_row_bytes=self.config.queue_max_row_bytes,
        )
        self.updater = MemoryUpdater(self.config, self.storage, llm)
        self.budget = LLMBudget(
            self.storage.engine if isinstance(self.storage, SQLStorage) else None,
            daily_calls=self.config.llm_daily_calls_per_tenant,
            daily_tokens=self.config.llm_daily_tokens_per_tenant,
        )
        self.counter = make_token_counter(
            self.config.token_counting, self.config.tiktoken_encoding_file
        )
        self.recall = Recall(self.config, self.storage, self.counter)
        self.worker = UpdateWorker(
            self.queue,
            self._run,
            workers=self.config.workers,
            sweep_interval=self.config.sweep_interval_seconds,
        )
        self.spool = Spool(
            self.queue,
            directory=self._spool_directory(),
            max_conversations=self.config.spool_max_conversations,
            max_per_tenant=self.config.spool_max_per_tenant,
            retry_seconds=self.config.spool_retry_seconds,
            on_queued=self.worker.notify,
        )
        # The save of an update completes its queue row in the same transaction.
        self._completes_in_save = (
            isinstance(self.storage, SQLStorage) and self.storage.engine is self.queue.engine
        )
        worst_llm_call = self.config.llm_timeout_seconds * (self.config.llm_max_retries + 1)
        if self.config.lease_seconds <= worst_llm_call:
            logger.warning(
                "memory_sql: lease_seconds (%s) is not longer than an LLM call may take "
                "(llm_timeout_seconds × (llm_max_retries + 1) = %s): a slow update may be "
                "claimed and run again by another worker",
                self.config.lease_seconds,
                worst_llm_call,
            )
        self.on_result = on_result
        self._problems = 0
        self._problems_lock = threading.Lock()
        self._llm_usage = {
            "llm_calls": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "rejected_items": 0,
        }
        self._rejected: Counter[str] = Counter()
        self._has_watermarks: bool | None = None
        self._closed = False
        self._warned_no_model = False
        if start:
            self._warn_if_no_model()
            self.worker.start()
            if self.config.closed_fact_retention_days > 0:
                self.worker.every(self.config.purge_interval_seconds, self.purge_closed, "purge")

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
        return take_conversation(messages, patterns=self._patterns)

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
        days = self.config.closed_fact_retention_days
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
        done = self.worker.flush(timeout)
        return done and len(self.spool) == 0

    def rejections(self) -> dict[str, int]:
        """The parts of the memory LLM's replies refused here since start, by reason
        (:mod:`memory_sql.update.rejections`), most frequent first."""
        with self._problems_lock:
            return dict(self._rejected.most_common())

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
            **self._llm_usage,
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
        """The queue's rows (every process's), failed first, then by due time; only the
        ``failed`` ones (given up after ``max_attempts``) if ``failed_only``; only those of the
        tenant, user or agent given. Each has its ``key``, for :meth:`retry_failed` and
        :meth:`drop_updates` (syntax: :mod:`memory_sql.queue.manage`).

        Raises:
            InvalidScopeError: a filter is malformed.
            StorageError: the queue's database cannot be read.
        """
        return manage.list_updates(
            self.queue.engine,
            failed_only=failed_only,
            tenant_id=tenant_id,
            user_id=user_id,
            agent_name=agent_name,
            limit=limit,
        )

    def retry_failed(self, keys: Iterable[str | UpdateKey] | None = None) -> QueueChange:
        """Run updates again: every ``failed`` row, or the rows ``keys`` name
        (``"[KIND:]TENANT/USER[/AGENT[/THREAD]]"``, as :meth:`pending_updates` shows them;
        a waiting row is made due now too). Each gets ``attempts`` 0, no last error, and is
        due now; a started service's worker runs it at once. Rows a worker is running are
        left alone (``running`` in the result).

        Raises:
            ValueError: a key is malformed.
            UpdateNotFoundError: a key names no row (nothing was changed).
            StorageError: the queue's database failed.
        """
        change = manage.retry_updates(self.queue.engine, keys)
        if change.changed:
            self.worker.notify(utcnow())
        return change

    def drop_updates(self, keys: Iterable[str | UpdateKey] | None = None) -> QueueChange:
        """Delete queued updates: every ``failed`` row, or the rows ``keys`` name (see
        :meth:`retry_failed`). Their conversations are not learned from. Rows a worker is
        running are left alone (``running`` in the result).

        Raises:
            ValueError: a key is malformed.
            UpdateNotFoundError: a key names no row (nothing was deleted).
            StorageError: the queue's database failed.
        """
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
        finished = self.worker.stop(timeout)
        if not finished:
            logger.warning("memory_sql: closed with updates still running; they finish alone")
            return False
        self.updater.close()
        if self._owns_storage:
            self.storage.close()
        for engine in self._owned_engines:
            engine.dispose()
        return finished

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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

    def _run(self, item: PendingUpdate) -> RunOutcome:
        with acting_for(item.scope.tenant_id):
            return self._run_for_tenant(item)

    def _run_for_tenant(self, item: PendingUpdate) -> RunOutcome:
        if item.reply is None and self.budget.limited:  # a stored reply needs no LLM call
            try:
                over = self.budget.over(item.scope.tenant_id)
            except MemorySQLError:
                over = None  # the update meets the same database, and fails or not by itself
            if over is not None:
                self.budget.hold(item.scope.tenant_id, over)
                return RunOutcome(False, over, wait_seconds=self.budget.wait_seconds())
        # Only what follows the thread's watermark is new (memory_sql.update.watermark); the last
        # exchange before it goes along as marked context.
        cut = self._cut(item)
        messages = cut.new if cut is not None else item.messages
        context = cut.context if cut is not None else ()
        # A flush whose messages do not hold the watermark (they come before it, or it was
        # never set) is sent whole; it moves the watermark only when it was not past it.
        mark = None if cut is None else cut.last
        if cut is not None and item.kind == "flush" and cut.whole and cut.previous is not None:
            mark = None
        # A turn's oldest messages were learned from in earlier runs; a flush's were not, so a
        # flush too long for one prompt is learned from part by part.
        parts = split_conversation(messages) if item.kind == "flush" else [messages]
        parts = parts or [[]]
        single = len(parts) == 1
        completed = False
        moved = False

        def complete_with_the_save(connection: Any) -> None:
            nonlocal completed, moved
            if mark is not None:
                watermark.move_on(connection, item.scope, item.thread_id, mark)
                moved = True
            self.queue.complete_on(connection, item)
            completed = True

        for number, part in enumerate(parts, 1):
            last = number == len(parts)
            moved = False
            try:
                result = self.updater.update_from(
                    part,
                    item.scope,
                    item.thread_id,
                    correction_detected=item.signals.correction,
                    reinforcement_detected=item.signals.reinforcement,
                    reply=_stored_reply(item) if single else None,
                    in_transaction=complete_with_the_save
                    if last and self._completes_in_save
                    else None,
                    context=context if number == 1 else (),
                    attempt=item.attempts,
                )
            except LeaseLostError as exc:
                return RunOutcome(False, str(exc), lease_lost=True)
            if self.on_result is not None:
                self.on_result(result)
            if result.llm_called:
                self.budget.spent(
                    item.scope.tenant_id, 1, result.prompt_tokens + result.completion_tokens
                )
                with self._problems_lock:
                    self._llm_usage["llm_calls"] += result.llm_calls or 1
                    self._llm_usage["prompt_tokens"] += result.prompt_tokens
                    self._llm_usage["completion_tokens"] += result.completion_tokens
            if result.rejected:
                with self._problems_lock:
                    self._llm_usage["rejected_items"] += sum(result.rejected.values())
                    self._rejected.update(result.rejected)
            if not result.ok:
                if result.conflicted and single and result.reply is not None:
                    return RunOutcome(
                        False, result.error, retry_reply=result.reply.model_dump_json()
                    )
                return RunOutcome(False, result.error)
        if mark is not None and not moved:
            # Nothing was saved (nothing new, or nothing to change): move it on its own.
            try:
                watermark.move(self.queue.engine, item.scope, item.thread_id, mark)
            except Exception as exc:
                logger.warning(
                    "memory %s, thread %s: cannot move the watermark: %s",
                    item.scope,
                    item.thread_id,
                    " ".join(str(exc).split())[:300],
                )
        return RunOutcome(True, completed=completed)

    def _cut(self, item: PendingUpdate) -> watermark.Cut | None:
        """``item``'s conversation cut at its thread's watermark; None when the queue's
        database has no watermarks (an older schema) or cannot be read (all is sent)."""
        if self._has_watermarks is False:
            return None
        try:
            if self._has_watermarks is None:
                self._has_watermarks = watermark.has_table(self.queue.engine)
                if not self._has_watermarks:
                    logger.warning(
                        "memory_sql: the database has no memory_watermarks table (upgrade it: "
                        "memory-sql db upgrade); every update sends the whole conversation"
                    )
                    return None
            previous = watermark.load(self.queue.engine, item.scope, item.thread_id)
        except Exception as exc:
            logger.warning(
                "memory %s, thread %s: cannot read the watermark (%s); sending it all",
                item.scope,
                item.thread_id,
                " ".join(str(exc).split())[:300],
            )
            return None
        return watermark.split(item.messages, previous, self.counter)

    def _warn_if_no_model(self) -> None:
        """Say once, when updates are about to run, that there is no model to run them."""
        if self._warned_no_model or self.updater.llm.model or not self.config.enabled:
            return
        self._warned_no_model = True
        logger.warning(
            "memory_sql: no memory LLM model is configured (set model_name in the config, "
            "MEMORY_SQL_MODEL_NAME or OPENAI_MODEL): every update will fail, and after "
            "max_attempts (%d) stay failed in the queue; `memory-sql queue list --failed` "
            "shows them, `memory-sql queue retry --all` runs them again",
            self.config.max_attempts,
        )

    def _problem(self, message: str, *args: object) -> None:
        with self._problems_lock:
            self._problems += 1
        logger.warning(message, *args, exc_info=True)

    def _open_storage(self) -> MemoryStorage:
        if self.config.storage_class:
            # storage: {use: pkg.module:Class, url: …} builds Class(url); without a url, Class().
            cls = load_storage_class(self.config.storage_class)
            given = "storage" in self.config.model_fields_set
            return cls(self.config.storage) if given else cls()
        target = self.config.storage
        if "://" not in target and not target.startswith("sqlite:"):
            return FileStorage(target)
        engine = create_engine(target, pool_size=max(5, self.config.workers + 3))
        self._owned_engines.append(engine)
        try:
            # A new SQLite file gets the schema; anything else only with auto_migrate.
            migrations.prepare_schema(engine, auto_migrate=self.config.auto_migrate)
        except BaseException:
            engine.dispose()
            raise
        return SQLStorage(engine)

    def _spool_directory(self) -> Path | None:
        """Where this service's spool files go: ``spool_dir``, else next to a SQLite file,
        else a folder of the user's state directory named by a digest of the storage URL (so
        the processes of one database share it). None when the spool is off."""
        if self.config.spool_max_conversations == 0:
            return None
        if self.config.spool_dir is not None:
            return Path(self.config.spool_dir)
        url = self.queue.engine.url
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            return Path(f"{url.database}.spool")
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        name = url.render_as_string(hide_password=True)
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        return Path(state) / "memory_sql" / "spool" / digest

    def _queue_engine(self) -> Engine:
        if isinstance(self.storage, SQLStorage):
            return self.storage.engine
        if isinstance(self.storage, FileStorage):
            path = Path(self.storage.root) / QUEUE_FILE
        else:
            path = Path(QUEUE_FILE)
        engine = create_engine(f"sqlite:///{path}")
        self._owned_engines.append(engine)
        migrations.upgrade(engine)
        return engine


def _stored_reply(item: PendingUpdate) -> MemoryUpdate | None:
    """The reply a run that lost to version conflicts left on the row, if it still reads."""
    if item.reply is None:
        return None
    try:
        return MemoryUpdate.model_validate_json(item.reply)
    except ValueError:
        logger.warning("memory %s: the stored reply is unreadable; asking the LLM", item.scope)
        return None
