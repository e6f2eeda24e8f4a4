""":class:`SQLMemoryManager`: memory_sql as DeerFlow's pluggable memory backend.

The one module of memory_sql that imports DeerFlow (``deerflow.agents.memory.manager``: the
``MemoryManager`` base and its error classes, nothing else). See the package docstring for
the configuration; below, how DeerFlow's calls map onto memory_sql.

Memories: DeerFlow's ``(user_id, agent_name)`` bucket is memory_sql's memory ``(tenant_id,
user_id, agent_name)`` with the tenant of ``backend_config`` (``agent_name`` None, or
DeerFlow's reserved ``__default__``, is the memory without an agent; names are lower-cased).
Each memory holds its sections and its facts (memory_sql keeps summaries per memory, not per
user: an agent's updates rewrite that agent's summaries).

Returned documents are DeerFlow's memory shape (:meth:`MemoryDocument.to_deerflow
<memory_sql.MemoryDocument.to_deerflow>`): ``version "1.0"``, ``revision`` (the stored
version), ``lastUpdated`` (now, for a memory never saved), the six sections, and facts with
``id, content, category, confidence, createdAt, source`` (+ ``updatedAt``, ``sourceError``);
``source`` is the thread a fact was learned from, or ``manual`` for a fact made by
:meth:`~SQLMemoryManager.create_fact` (or imported as manual, consolidation or import), or
``unknown``.

Errors, as DeerFlow's gateway expects them: a version conflict that survives the retries is
``MemoryConflictError`` (409); a casefold duplicate ``ValueError("Duplicate fact")`` (409); a
confidence that is not a number in [0, 1] ``ValueError("confidence")`` (400); empty content
``ValueError("content")``, a bad category or name another ``ValueError`` (400); an unknown
fact id ``KeyError`` (404). The database being down is a :class:`~memory_sql.StorageError`
(500), naming what to check. :meth:`~SQLMemoryManager.get_context`, :meth:`add` and
:meth:`add_nowait` never raise: they log (the agent's turn goes on without memory).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any, ClassVar, Literal

from deerflow.agents.memory.manager import MemoryConflictError, MemoryManager
from pydantic import PrivateAttr, ValidationError

from ... import ops
from ...database import redacted
from ...errors import ConfigError, DuplicateFactError, FactNotFoundError, UpdateNotFoundError
from ...errors import VersionConflictError as _VersionConflict
from ...models import Fact, MemoryDocument, format_timestamp, utcnow
from ...queue import PendingUpdate, RunOutcome, UpdateKey
from ...queue import manage as queue_manage
from ...recall.injection import format_memory_for_injection
from ...scope import Scope
from ...service import MemoryService
from ...storage import SQLStorage
from ...tokens import EstimateCounter, make_token_counter
from ...update.eviction import evict, needs_heat
from .config import BackendSettings, read_backend_config, sqlite_folder
from .llm import CURRENT_UPDATE, UpdateContext, choose_llm

logger = logging.getLogger(__name__)

DEFAULT_AGENT_BUCKET = "__default__"
"""DeerFlow's name for the facts of no agent."""
MANUAL = "manual"
"""The ``source`` of a fact made through :meth:`SQLMemoryManager.create_fact`."""
CLOSE_TIMEOUT_SECONDS = 10.0
"""How long :meth:`SQLMemoryManager.close` waits for updates still running."""
_TRACE_IDS = 4096
_SECRET_WORDS = ("key", "pass", "secret", "token")


class _TraceIds:
    """The trace id of each thread's latest ``add``, for the callbacks of its update (the
    queue is durable and does not keep them; an update run by another process has none)."""

    def __init__(self, size: int = _TRACE_IDS) -> None:
        self._ids: OrderedDict[tuple[Scope, str], str] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def remember(self, scope: Scope, thread_id: str, trace_id: str | None) -> None:
        with self._lock:
            if trace_id is None:
                self._ids.pop((scope, thread_id), None)
                return
            self._ids[(scope, thread_id)] = trace_id
            self._ids.move_to_end((scope, thread_id))
            while len(self._ids) > self._size:
                self._ids.popitem(last=False)

    def get(self, scope: Scope, thread_id: str) -> str | None:
        with self._lock:
            return self._ids.get((scope, thread_id))


class _Service(MemoryService):
    """The service, with each update run inside its :data:`CURRENT_UPDATE` (for the host's
    LLM callbacks)."""

    def __init__(self, *args: Any, trace_ids: _TraceIds, **kwargs: Any) -> None:
        self._trace_ids = trace_ids
        super().__init__(*args, **kwargs)

    def _run(self, item: PendingUpdate) -> RunOutcome:
        scope = item.scope
        token = CURRENT_UPDATE.set(
            UpdateContext(
                thread_id=item.thread_id,
                user_id=scope.user_id,
                agent_name=scope.agent_name,
                trace_id=self._trace_ids.get(scope, item.thread_id),
            )
        )
        try:
            return super()._run(item)
        finally:
            CURRENT_UPDATE.reset(token)


def _agent(agent_name: str | None) -> str | None:
    return None if agent_name in (None, DEFAULT_AGENT_BUCKET) else agent_name


def _confidence(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise ValueError("confidence")
    return float(value)


def _content(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("content")
    return value


@contextmanager
def _contract_errors() -> Iterator[None]:
    """memory_sql's errors as DeerFlow's gateway maps them (see the module docstring)."""
    try:
        yield
    except _VersionConflict as exc:
        raise MemoryConflictError(str(exc)) from exc
    except DuplicateFactError as exc:
        raise ValueError("Duplicate fact") from exc
    except FactNotFoundError as exc:
        raise KeyError(exc.fact_id) from exc


_HOST_HOOKS: ContextVar[dict[str, Any] | None] = ContextVar(
    "memory_sql_deerflow_hooks", default=None
)
"""The host hooks of the :meth:`SQLMemoryManager.from_config` building an instance."""


@contextmanager
def _unwrapped_config_error() -> Iterator[None]:
    """A :class:`ConfigError` raised while pydantic builds the manager, as itself (pydantic
    wraps a ``ValueError`` of ``model_post_init`` in a ``ValidationError``)."""
    try:
        yield
    except ValidationError as exc:
        errors = exc.errors()
        cause = errors[0].get("ctx", {}).get("error") if len(errors) == 1 else None
        if isinstance(cause, ConfigError):
            raise cause from None
        raise


class SQLMemoryManager(MemoryManager):
    """DeerFlow's ``MemoryManager`` on memory_sql: SQL storage with versioned saves, a
    casefold-unique fact constraint, a durable per-thread debounced queue, several workers.

    Built by DeerFlow with :meth:`from_config` (or directly,
    ``SQLMemoryManager(backend_config={…})``, without host hooks). Construction opens the
    database (a new SQLite file gets the schema; PostgreSQL must be at the schema head:
    ``memory-sql db upgrade``, unless ``auto_migrate``) and, unless ``in_process_worker:
    false``, starts the worker threads.

    Raises (at construction):
        ConfigError: ``backend_config`` has an unknown key or an invalid value.
        SchemaOutOfDateError: the database is not at the schema head.
        StorageError: the database cannot be reached or written.
    """

    supports_search: ClassVar[bool] = True

    _settings: BackendSettings = PrivateAttr()
    _service: _Service = PrivateAttr()
    _trace_ids: _TraceIds = PrivateAttr(default_factory=_TraceIds)
    _closed: bool = PrivateAttr(default=False)
    _close_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def from_config(
        cls,
        backend_config: dict[str, Any],
        *,
        mode: Literal["middleware", "tool"] = "middleware",
        **host_hooks: Any,
    ) -> SQLMemoryManager:
        """The backend for DeerFlow's ``memory.backend_config`` (see the package docstring).

        Of the host hooks it uses ``callbacks`` (called around each memory LLM call) and
        ``host_llm_factory`` (the host's default chat model, when ``backend_config`` names no
        OpenAI-compatible settings); the others (``should_keep_hidden_message``,
        ``trace_context_manager``, ``extraction_callback``) are accepted and not used.
        """
        token = _HOST_HOOKS.set(host_hooks)
        try:
            return cls(
                backend_config=backend_config, mode=mode, callbacks=host_hooks.get("callbacks")
            )
        finally:
            _HOST_HOOKS.reset(token)

    def __init__(self, **data: Any) -> None:
        with _unwrapped_config_error():
            super().__init__(**data)

    def model_post_init(self, context: Any) -> None:
        hooks = _HOST_HOOKS.get() or {}
        self._settings = settings = read_backend_config(self.backend_config)
        folder = sqlite_folder(settings.url)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        llm = choose_llm(
            settings.config,
            own_llm=settings.own_llm,
            host_llm_factory=hooks.get("host_llm_factory"),
            callbacks=self.callbacks,
        )
        self._service = _Service(
            settings.config,
            llm=llm,
            start=settings.in_process_worker,
            trace_ids=self._trace_ids,
        )
        logger.info(
            "memory_sql: DeerFlow memory in %s (tenant %s, %s)",
            settings.redacted_url(),
            settings.tenant_id,
            f"{settings.config.queue.workers} in-process workers"
            if settings.in_process_worker
            else "updates left to `memory-sql worker`",
        )

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, _redacted_config(value) if name == "backend_config" else value

    # the agent's side ------------------------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Queue a finished conversation (raw LangChain messages) for a debounced update of
        the memory (``debounce_seconds`` after the thread's latest one, at most
        ``max_debounce_seconds``). Never raises."""
        self._remember_trace(thread_id, user_id, agent_name, trace_id)
        self._service.after_agent(
            messages,
            thread_id=thread_id,
            user_id=user_id,
            agent_name=_agent(agent_name),
            tenant_id=self._settings.tenant_id,
        )

    def add_nowait(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> None:
        """Queue messages summarization is about to drop, due now (no debounce). Never raises."""
        self._service.before_summarization(
            messages,
            thread_id=thread_id,
            user_id=user_id,
            agent_name=_agent(agent_name),
            tenant_id=self._settings.tenant_id,
        )

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
    ) -> str:
        """The memory as prompt text within ``injected_memory_max_tokens`` (guaranteed
        categories in ``guaranteed_token_budget`` on top), for DeerFlow to wrap in
        ``<memory>``; ``""`` when there is nothing to show, memory is off, or it cannot be
        read (logged). Never raises.

        DeerFlow asks for the context with no query: relevance reaches the agent through
        :meth:`search` (its ``memory_search`` tool). In ``mode: tool`` the context holds the
        summaries only, and the facts stay behind that search."""
        try:
            config = self._settings.config
            if not config.enabled:
                return ""
            doc = self._load(user_id, agent_name)
            if self.mode == "tool":
                doc = doc.model_copy(update={"facts": []})
            return format_memory_for_injection(
                doc,
                config.recall.injected_memory_max_tokens,
                config.recall.guaranteed_categories,
                config.recall.guaranteed_token_budget,
                self._service.counter,
            )
        except Exception:
            logger.warning(
                "memory_sql: cannot read the memory of user %r, agent %r; none injected",
                user_id,
                agent_name,
                exc_info=True,
            )
            return ""

    async def aadd(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """:meth:`add` in a worker thread (it writes to the database)."""
        await asyncio.to_thread(
            self.add, thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id
        )

    async def aget_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
    ) -> str:
        """:meth:`get_context` in a worker thread (it reads the database)."""
        return await asyncio.to_thread(
            self.get_context, user_id, agent_name=agent_name, thread_id=thread_id
        )

    async def asearch(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`search` in a worker thread."""
        return await asyncio.to_thread(
            self.search, query, top_k, user_id=user_id, agent_name=agent_name, category=category
        )

    # reading ---------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """Up to ``top_k`` facts of the memory most relevant to ``query``, best first: the
        database's full-text index scores them (BM25, casefolded as duplicates are:
        ``strasse`` finds "Straße"; CJK characters are terms of their own), blended with
        confidence and recency as ranked recall is (:mod:`memory_sql.recall.ranking`).
        ``category`` filters before the ``top_k`` cut. A query with no words or ``top_k < 1``
        finds nothing."""
        if not isinstance(query, str) or not query.strip() or top_k < 1:
            return []
        wanted = category.strip().lower() if isinstance(category, str) else None
        scope = self._scope(user_id, agent_name)
        doc = self._storage.load(**scope.arguments())
        by_id = {fact.id: fact for fact in doc.facts}
        ranked = self._service.recall.ranking(doc, scope, query)
        facts = [
            by_id[fact_id]
            for fact_id in ranked
            if fact_id in by_id and (wanted is None or by_id[fact_id].category == wanted)
        ][:top_k]
        found: list[dict[str, Any]] = MemoryDocument(facts=facts).to_deerflow()["facts"]
        return found

    def get_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """The memory document (an empty one, revision 0, if nothing is stored)."""
        return _document(self._load(user_id, agent_name))

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """The memory as stored now: every read checks the stored version, so this is
        :meth:`get_memory`."""
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """The memory document, as DeerFlow's ``memory.json`` (see :meth:`get_memory`)."""
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    # writing ---------------------------------------------------------------------------------

    def import_memory(
        self,
        memory_data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> dict[str, Any]:
        """Make the memory hold ``memory_data`` (DeerFlow's memory document): its sections
        and its facts, fact ids, creation times and sources kept; importing the same data
        again changes nothing. Returns the memory as stored.

        Raises:
            ImportFileError: ``memory_data`` is not a memory document (a ``ValueError``).
        """
        scope = self._scope(user_id, agent_name)
        with _contract_errors():
            ops.import_memory(
                self._storage,
                memory_data,
                **scope.arguments(),
                source="memory_data",
            )
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def clear_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Empty memory. ``agent_name`` None: everything of the user (every agent's memory,
        its waiting updates and fact history, as ``memory-sql forget``); an agent: that
        agent's facts and waiting updates, its summaries kept. Returns the emptied document.

        An update already running may still save afterwards (as with ``forget``)."""
        scope = self._scope(user_id, agent_name)
        if _agent(agent_name) is None:
            ops.forget_user(self._storage, scope.user_id, tenant_id=scope.tenant_id)
        else:
            self._change(scope, lambda doc: setattr(doc, "facts", []))
            self._drop_waiting_updates(scope)
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def delete_memory(self, *, user_id: str | None = None, agent_name: str | None = None) -> None:
        """Delete the memory. ``agent_name`` None: everything of the user, as
        :meth:`clear_memory`; an agent: that agent's sections, facts and waiting updates."""
        scope = self._scope(user_id, agent_name)
        if _agent(agent_name) is None:
            ops.forget_user(self._storage, scope.user_id, tenant_id=scope.tenant_id)
            return

        def empty(doc: MemoryDocument) -> None:
            blank = MemoryDocument()
            doc.user, doc.history, doc.facts = blank.user, blank.history, []

        self._change(scope, empty)
        self._drop_waiting_updates(scope)

    def create_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        """Add a fact by hand (``source`` ``manual``), the ``max_facts`` cap applied as to
        learned facts. Returns the memory and the new fact's id, None when the cap evicted it
        (then nothing was stored).

        Raises:
            ValueError: ``"confidence"`` (not a number in [0, 1]), ``"content"`` (empty),
                ``"Duplicate fact"`` (a casefold duplicate of a stored fact), or a bad
                category.
            MemoryConflictError: other writers kept winning.
        """
        confidence = _confidence(confidence)
        content = _content(content)
        scope = self._scope(user_id, agent_name)
        fact = _fact(content=content, category=category, confidence=confidence, source=MANUAL)
        config = self._settings.config
        kept = [False]

        def add(doc: MemoryDocument) -> None:
            if any(existing.key == fact.key for existing in doc.facts):
                raise ValueError("Duplicate fact")
            doc.facts.append(fact)
            heat = self._storage.access_heat(scope) if needs_heat(doc, config) else None
            evicted = evict(doc, config, now=utcnow(), heat=heat)
            kept[0] = fact.id not in evicted

        doc = self._change(scope, add)
        return _document(doc), fact.id if kept[0] else None

    def update_fact(
        self,
        fact_id: str,
        content: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Change a fact's content, category or confidence; what is None stays.

        Raises:
            KeyError: the memory has no fact ``fact_id``.
            ValueError: as for :meth:`create_fact`.
        """
        changes: dict[str, Any] = {}
        if confidence is not None:
            changes["confidence"] = _confidence(confidence)
        if content is not None:
            changes["content"] = _content(content)
        if category is not None:
            changes["category"] = category
        scope = self._scope(user_id, agent_name)

        def update(doc: MemoryDocument) -> None:
            index = next((i for i, fact in enumerate(doc.facts) if fact.id == fact_id), None)
            if index is None:
                raise KeyError(fact_id)
            fact = doc.facts[index]
            new = _replaced(fact, changes)
            if new.key != fact.key and any(
                other.key == new.key for other in doc.facts if other.id != fact_id
            ):
                raise ValueError("Duplicate fact")
            doc.facts[index] = new

        return _document(self._change(scope, update))

    def delete_fact(
        self, fact_id: str, *, agent_name: str | None = None, user_id: str | None = None
    ) -> dict[str, Any]:
        """Remove a fact.

        Raises:
            KeyError: the memory has no fact ``fact_id``.
        """
        scope = self._scope(user_id, agent_name)

        def delete(doc: MemoryDocument) -> None:
            kept = [fact for fact in doc.facts if fact.id != fact_id]
            if len(kept) == len(doc.facts):
                raise KeyError(fact_id)
            doc.facts = kept

        return _document(self._change(scope, delete))

    # operating it ----------------------------------------------------------------------------

    def warm(self) -> bool:
        """Load the token encoding now, not at the first request. True when token counting
        is as configured (tiktoken's ``cl100k_base`` loaded, or ``token_counting`` off);
        False when it fell back to the character estimate."""
        config = self._settings.config
        counter = make_token_counter(config.tokens.counting, config.tokens.encoding_file)
        return not config.tokens.counting or not isinstance(counter, EstimateCounter)

    def shutdown_flush(self, timeout: float) -> bool:
        """Run every waiting update now, for at most ``timeout`` seconds (a hard bound: the
        wait runs in a thread and is abandoned at the deadline). True only if everything
        queued finished; what did not stays queued in the database for the next start, or
        for another worker.

        With ``in_process_worker: false`` the updates are ``memory-sql worker``'s: this only
        writes what the process holds (conversations kept through a database outage), and is
        True when nothing is left in the process."""
        if self._closed:
            return True
        service = self._service
        finished = [False]

        def drain() -> None:
            try:
                if self._settings.in_process_worker:
                    finished[0] = service.flush(timeout)
                else:
                    service.spool.write()
                    finished[0] = len(service.spool) == 0
            except Exception:
                logger.warning("memory_sql: the shutdown flush failed", exc_info=True)

        thread = threading.Thread(target=drain, name="memory-sql-shutdown-flush", daemon=True)
        thread.start()
        thread.join(max(0.0, timeout))
        if thread.is_alive():
            logger.warning(
                "memory_sql: shutdown flush still running after %.1f s; updates left are "
                "kept in the queue",
                timeout,
            )
            return False
        return finished[0]

    def status(self) -> dict[str, int]:
        """The service's counters (:meth:`MemoryService.status`)."""
        return self._service.status()

    def close(self) -> None:
        """Stop the workers (waiting up to :data:`CLOSE_TIMEOUT_SECONDS` for updates in
        flight; the rest stay queued) and close the database. Safe to call twice."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._service.close(timeout=CLOSE_TIMEOUT_SECONDS)

    # internals -------------------------------------------------------------------------------

    @property
    def _storage(self) -> SQLStorage:
        storage = self._service.storage
        assert isinstance(storage, SQLStorage)
        return storage

    @property
    def _engine(self) -> Any:
        return self._storage.engine

    def _scope(self, user_id: str | None, agent_name: str | None) -> Scope:
        return Scope.of(
            user_id=user_id, agent_name=_agent(agent_name), tenant_id=self._settings.tenant_id
        )

    def _load(self, user_id: str | None, agent_name: str | None) -> MemoryDocument:
        scope = self._scope(user_id, agent_name)
        return self._storage.load(**scope.arguments())

    def _change(self, scope: Scope, change: Callable[[MemoryDocument], None]) -> MemoryDocument:
        """Load, ``change``, save with the version loaded; again on a version conflict, up
        to :data:`memory_sql.ops.SAVE_ATTEMPTS` times. Returns the memory as stored."""
        where = scope.arguments()
        with _contract_errors():
            for attempt in range(1, ops.SAVE_ATTEMPTS + 1):
                doc = self._storage.load(**where)
                change(doc)
                try:
                    self._storage.save(doc, **where, expected_version=doc.version)
                except _VersionConflict:
                    if attempt == ops.SAVE_ATTEMPTS:
                        raise
                    continue
                return self._storage.load(**where)
        raise AssertionError("unreachable")

    def _drop_waiting_updates(self, scope: Scope) -> None:
        key = UpdateKey(scope.tenant_id, scope.user_id, agent_name=scope.agent_key)
        with suppress(UpdateNotFoundError):  # nothing was waiting
            queue_manage.drop_updates(self._engine, [key])

    def _remember_trace(
        self, thread_id: str, user_id: str | None, agent_name: str | None, trace_id: str | None
    ) -> None:
        # A bad scope: the service reports it when it refuses the conversation.
        with suppress(Exception):
            self._trace_ids.remember(self._scope(user_id, agent_name), thread_id, trace_id)


def _fact(*, source: str, **fields: Any) -> Fact:
    try:
        return Fact(source_thread_id=source, **fields)
    except ValidationError as exc:
        raise ValueError(f"invalid fact: {ops.describe_validation_error(exc)}") from None


def _replaced(fact: Fact, changes: dict[str, Any]) -> Fact:
    try:
        return fact.replace(**changes)
    except ValidationError as exc:
        raise ValueError(f"invalid fact: {ops.describe_validation_error(exc)}") from None


def _document(doc: MemoryDocument) -> dict[str, Any]:
    data = doc.to_deerflow()
    if not data["lastUpdated"]:
        data["lastUpdated"] = format_timestamp(utcnow())
    return data


def _redacted_config(config: Any) -> Any:
    if not isinstance(config, dict):
        return config
    shown: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            shown[key] = _redacted_config(value)
        elif isinstance(key, str) and any(word in key.lower() for word in _SECRET_WORDS):
            shown[key] = "***" if value is not None else None
        elif key in ("url", "storage", "database_url", "llm_base_url", "base_url") and value:
            shown[key] = redacted(str(value))
        else:
            shown[key] = value
    return shown
