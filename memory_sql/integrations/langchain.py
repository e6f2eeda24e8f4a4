"""LangChain v1 agent middleware for memory_sql (the ``memory-sql[langchain]`` extra; tested
with langchain 1.1 and 1.5).

Three pieces, each a LangChain ``AgentMiddleware`` for
:func:`langchain.agents.create_agent`, all around one
:class:`~memory_sql.service.MemoryService`::

    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from memory_sql.integrations.langchain import (
        MemoryContextMiddleware, MemoryMiddleware, MemorySummarizationMiddleware)

    service = MemoryService(MemoryConfig.from_yaml("config.yaml"))
    agent = create_agent(
        model,
        tools,
        system_prompt="You are a helpful assistant.",
        middleware=[
            MemorySummarizationMiddleware(service, model, trigger=("tokens", 4000)),
            MemoryContextMiddleware(service, agent_name="coder"),
            MemoryMiddleware(service, agent_name="coder"),
        ],
        checkpointer=InMemorySaver(),
    )
    agent.invoke(
        {"messages": [{"role": "user", "content": "hi"}]},
        {"configurable": {"thread_id": "t1", "user_id": "u1"}},
    )

- :class:`MemoryMiddleware` (``after_agent``): hands the finished conversation to
  ``service.after_agent`` (debounced background update).
- :class:`MemoryContextMiddleware` (``before_agent`` + ``wrap_model_call``): on the first run of
  a thread, reads ``service.memory_context`` (the ``<system-reminder>`` with the current date and
  the ``<user_memory>`` block) into a private state key; every model call of the thread then gets
  that block appended to its system prompt. The block is frozen per thread, as in DeerFlow: later
  runs of the thread reuse it and do not read the database again. When the memory is empty, a
  date-only ``<system-reminder>`` is injected instead (``date_when_empty``).
- :class:`MemorySummarizationMiddleware`: LangChain's ``SummarizationMiddleware`` that first
  hands the messages it is about to drop to ``service.before_summarization`` (an update due
  now), so nothing said before a summary is lost to memory. :func:`before_summarization_hook`
  is the same hand-off as a plain function, for a summarization step of your own.

**Where the ids come from.** For each of ``thread_id``, ``user_id``, ``tenant_id`` and (when no
fixed ``agent_name`` is given) ``agent_name``, the first of these that is set:

1. the run's context (``create_agent(..., context_schema=…)``, ``invoke(..., context=…)``): a
   mapping key or an attribute named by ``thread_id_key`` / ``user_id_key`` / … ;
2. the run's config: ``config["configurable"][key]`` (where LangGraph keeps ``thread_id``);
3. for the thread only: LangGraph's ``runtime.execution_info.thread_id``.

No thread id: :class:`MemoryMiddleware` and the summarization hand-off skip (debug log), the
context middleware still injects (memory belongs to the user, not the thread). No user id: the
service's default user. "Once per thread" relies on the thread's state being kept between runs,
i.e. on a checkpointer; without one every run is a new thread and reads the memory again.

**Failures never reach the agent.** The service does not raise; should it anyway, the hook logs
the exception and the agent goes on without memory for that step. Async agents
(``ainvoke``/``astream``) run the service's blocking calls in a worker thread.

**Order in** ``middleware=[…]``: put :class:`MemoryContextMiddleware` after any middleware that
replaces the system prompt (``@dynamic_prompt``), since the first in the list wraps the later
ones and the innermost change wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Annotated, Any

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        SummarizationMiddleware,
    )
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain_core.messages import BaseMessage, RemoveMessage, SystemMessage
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from typing_extensions import NotRequired
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "memory_sql.integrations.langchain needs LangChain v1 (langchain>=1.1): "
        "from memory_sql's clone, pip install -e '.[langchain]'"
    ) from exc

from ..recall.injection import date_reminder

if TYPE_CHECKING:
    from langgraph.runtime import Runtime

    from ..service import MemoryService

__all__ = [
    "STATE_KEY",
    "MemoryContextMiddleware",
    "MemoryContextState",
    "MemoryMiddleware",
    "MemorySummarizationMiddleware",
    "before_summarization_hook",
]

logger = logging.getLogger(__name__)

STATE_KEY = "memory_sql_context"
"""The private agent-state key holding the block injected for the thread."""


class MemoryContextState(AgentState):
    """Agent state with the memory block frozen for the thread (private: neither input nor
    output of the agent, but kept in its checkpoints)."""

    memory_sql_context: NotRequired[Annotated[str, PrivateStateAttr]]


@dataclass(frozen=True)
class _Ids:
    thread_id: str | None
    user_id: str | None
    agent_name: str | None
    tenant_id: str | None


class _IdReader:
    """Reads the scope of the current run from the runtime context or the run config."""

    def __init__(
        self,
        *,
        agent_name: str | None,
        thread_id_key: str,
        user_id_key: str,
        tenant_id_key: str,
        agent_name_key: str,
    ) -> None:
        self.agent_name = agent_name
        self.thread_id_key = thread_id_key
        self.user_id_key = user_id_key
        self.tenant_id_key = tenant_id_key
        self.agent_name_key = agent_name_key

    def read(self, runtime: Runtime[Any] | None) -> _Ids:
        context = getattr(runtime, "context", None)
        configurable = _configurable()

        def lookup(key: str) -> str | None:
            for source in (context, configurable):
                value = _get(source, key)
                if value is not None and value != "":
                    return str(value)
            return None

        thread_id = lookup(self.thread_id_key)
        if thread_id is None:
            info = getattr(runtime, "execution_info", None)
            value = getattr(info, "thread_id", None)
            thread_id = str(value) if value else None
        agent_name = self.agent_name
        if agent_name is None:
            agent_name = lookup(self.agent_name_key)
        return _Ids(
            thread_id=thread_id,
            user_id=lookup(self.user_id_key),
            agent_name=agent_name,
            tenant_id=lookup(self.tenant_id_key),
        )


def _get(source: Any, key: str) -> Any:
    if source is None:
        return None
    if isinstance(source, Mapping):
        return source.get(key)
    return getattr(source, key, None)


def _configurable() -> Mapping[str, Any]:
    """``config["configurable"]`` of the run being executed, or ``{}`` outside a run."""
    try:
        configurable = get_config().get("configurable")
    except Exception:  # RuntimeError outside a runnable context
        return {}
    return configurable if isinstance(configurable, Mapping) else {}


def _is_summary(message: Any) -> bool:
    """Whether ``message`` is a summary written by LangChain's summarization (its content
    reached memory through the summarization hand-off already)."""
    kwargs = getattr(message, "additional_kwargs", None)
    if kwargs is None and isinstance(message, Mapping):
        kwargs = message.get("additional_kwargs")
    return isinstance(kwargs, Mapping) and kwargs.get("lc_source") == "summarization"


def _conversation(messages: Any) -> Any:
    if not isinstance(messages, list):
        return messages  # the service reports what it cannot read
    return [message for message in messages if not _is_summary(message)]


def _local_today() -> date:
    return datetime.now().astimezone().date()


def _with_block(system_message: SystemMessage | None, block: str) -> SystemMessage:
    """``system_message`` with ``block`` appended after a blank line (a new one if none)."""
    if system_message is None:
        return SystemMessage(content=block)
    content = system_message.content
    if isinstance(content, str):
        new_content: Any = f"{content}\n\n{block}" if content else block
    else:
        new_content = [*content, {"type": "text", "text": f"\n\n{block}"}]
    return system_message.model_copy(update={"content": new_content})


class MemoryMiddleware(AgentMiddleware):
    """After each agent run, queue the conversation for a memory update (``after_agent``).

    Calls ``service.after_agent(state["messages"], thread_id=…, user_id=…, agent_name=…,
    tenant_id=…)``, which filters, detects signals and enqueues (debounced); LangChain's
    summary messages are left out (what they summarize went through the summarization
    hand-off). Without a thread id the run is skipped. Never raises into the agent.
    """

    def __init__(
        self,
        service: MemoryService,
        *,
        agent_name: str | None = None,
        thread_id_key: str = "thread_id",
        user_id_key: str = "user_id",
        tenant_id_key: str = "tenant_id",
        agent_name_key: str = "agent_name",
        timeout: float = 5.0,
    ) -> None:
        super().__init__()
        self.service = service
        self.timeout = timeout
        self._ids = _IdReader(
            agent_name=agent_name,
            thread_id_key=thread_id_key,
            user_id_key=user_id_key,
            tenant_id_key=tenant_id_key,
            agent_name_key=agent_name_key,
        )

    def after_agent(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        try:
            self._enqueue(state, self._ids.read(runtime))
        except Exception:
            logger.exception("memory: after_agent hook failed; the conversation is not queued")
        return None

    async def aafter_agent(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        # The agent waits at most ``timeout`` seconds; a slow database finishes queueing alone.
        try:
            await asyncio.wait_for(
                asyncio.to_thread(self._enqueue, state, self._ids.read(runtime)), self.timeout
            )
        except asyncio.TimeoutError:
            logger.warning("memory: queueing the conversation took over %.1f s", self.timeout)
        except Exception:
            logger.exception("memory: after_agent hook failed; the conversation is not queued")
        return None

    def _enqueue(self, state: AgentState, ids: _Ids) -> bool:
        if not ids.thread_id:
            logger.debug("memory: no thread id in the run's context or config; not queued")
            return False
        return self.service.after_agent(
            _conversation(state.get("messages") or []),
            thread_id=ids.thread_id,
            user_id=ids.user_id,
            agent_name=ids.agent_name,
            tenant_id=ids.tenant_id,
        )


class MemoryContextMiddleware(AgentMiddleware[MemoryContextState, Any]):
    """Put the user's memory and the current date into the system prompt, once per thread.

    ``before_agent``: if the thread's state holds no block yet, read
    ``service.memory_context(user_id=…, agent_name=…, tenant_id=…, today=…, query=…)`` and keep
    it under the private state key :data:`STATE_KEY` (an empty memory gives the date-only
    reminder, or nothing with ``date_when_empty=False``). The query is the run's messages (the
    memory's facts are chosen for the user's latest turns); ``ranked=False`` reads the block by
    category and confidence instead. ``wrap_model_call``: append the kept block to the system
    prompt of every model call. Later runs of the same thread (same checkpointer thread) reuse
    the kept block: the memory is frozen per thread and not read again, unless
    ``refresh_each_run`` (then every run reads it anew, for its own turn).

    ``today`` returns the date to show (default: this machine's local date). Async runs give
    the memory read ``timeout`` seconds; past that the run goes on without memory and the next
    run of the thread tries again.
    """

    state_schema = MemoryContextState

    def __init__(
        self,
        service: MemoryService,
        *,
        agent_name: str | None = None,
        user_id_key: str = "user_id",
        tenant_id_key: str = "tenant_id",
        agent_name_key: str = "agent_name",
        thread_id_key: str = "thread_id",
        date_when_empty: bool = True,
        today: Callable[[], date] | None = None,
        timeout: float = 5.0,
        ranked: bool = True,
        refresh_each_run: bool = False,
    ) -> None:
        super().__init__()
        self.service = service
        self.ranked = ranked
        self.refresh_each_run = refresh_each_run
        self._ids = _IdReader(
            agent_name=agent_name,
            thread_id_key=thread_id_key,
            user_id_key=user_id_key,
            tenant_id_key=tenant_id_key,
            agent_name_key=agent_name_key,
        )
        self.date_when_empty = date_when_empty
        self._today = today if today is not None else _local_today
        self.timeout = timeout

    def before_agent(
        self, state: MemoryContextState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if _kept_block(state) is not None and not self.refresh_each_run:
            return None
        try:
            block = self._read(self._ids.read(runtime), self._query(state))
        except Exception:
            logger.exception("memory: reading the memory context failed; none injected")
            return None
        return {STATE_KEY: block}

    async def abefore_agent(
        self, state: MemoryContextState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if _kept_block(state) is not None and not self.refresh_each_run:
            return None
        try:
            ids = self._ids.read(runtime)
            query = self._query(state)
            block = await asyncio.wait_for(asyncio.to_thread(self._read, ids, query), self.timeout)
        except asyncio.TimeoutError:
            logger.warning(
                "memory: reading the memory context took over %.1f s; none injected",
                self.timeout,
            )
            return None
        except Exception:
            logger.exception("memory: reading the memory context failed; none injected")
            return None
        return {STATE_KEY: block}

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        return handler(self._with_memory(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        return await handler(self._with_memory(request))

    def _query(self, state: Any) -> list[Any] | None:
        messages = state.get("messages") if isinstance(state, Mapping) else None
        return list(messages) if self.ranked and messages else None

    def _read(self, ids: _Ids, query: list[Any] | None = None) -> str:
        today = self._today()
        block = self.service.memory_context(
            user_id=ids.user_id,
            agent_name=ids.agent_name,
            tenant_id=ids.tenant_id,
            today=today,
            query=query,
        )
        if not isinstance(block, str) or not block.strip():
            block = date_reminder(today) if self.date_when_empty else ""
        return block

    def _with_memory(self, request: ModelRequest) -> ModelRequest:
        try:
            block = _kept_block(request.state)
            if not block:
                return request
            if not hasattr(request, "system_message"):  # langchain 1.0: a plain string
                base = request.system_prompt
                text = f"{base}\n\n{block}" if base else block
                # langchain 1.0's override takes system_prompt; the installed one's stubs
                # (a later version) name system_message only.
                return request.override(system_prompt=text)  # type: ignore[call-arg]
            return request.override(system_message=_with_block(request.system_message, block))
        except Exception:
            logger.exception("memory: adding the memory to the system prompt failed")
            return request


def _kept_block(state: Any) -> str | None:
    value = state.get(STATE_KEY) if isinstance(state, Mapping) else None
    return value if isinstance(value, str) else None


def before_summarization_hook(
    service: MemoryService,
    *,
    agent_name: str | None = None,
    thread_id_key: str = "thread_id",
    user_id_key: str = "user_id",
    tenant_id_key: str = "tenant_id",
    agent_name_key: str = "agent_name",
) -> Callable[..., bool]:
    """A function ``hook(messages, runtime=None) -> bool`` that hands the messages about to be
    summarized away to ``service.before_summarization`` (an update due now, no debounce).

    Call it from a summarization step of your own, inside the agent run, before the messages
    are removed; ids are read as described in the module docstring (from ``runtime`` and the
    run's config). Returns whether a conversation was queued; never raises.
    """
    ids_reader = _IdReader(
        agent_name=agent_name,
        thread_id_key=thread_id_key,
        user_id_key=user_id_key,
        tenant_id_key=tenant_id_key,
        agent_name_key=agent_name_key,
    )

    def hook(messages: Sequence[Any], runtime: Runtime[Any] | None = None) -> bool:
        try:
            return _flush(service, messages, ids_reader.read(runtime))
        except Exception:
            logger.exception("memory: before_summarization hook failed; messages not queued")
            return False

    return hook


def _flush(service: MemoryService, messages: Sequence[Any], ids: _Ids) -> bool:
    if not ids.thread_id:
        logger.debug("memory: no thread id in the run's context or config; not flushed")
        return False
    return service.before_summarization(
        _conversation(list(messages)),
        thread_id=ids.thread_id,
        user_id=ids.user_id,
        agent_name=ids.agent_name,
        tenant_id=ids.tenant_id,
    )


def _dropped(state: Mapping[str, Any], update: Mapping[str, Any] | None) -> list[BaseMessage]:
    """The messages of ``state`` that ``update`` (a ``before_model`` result) removes."""
    if not update:
        return []
    new = update.get("messages") or []
    removals = {m.id for m in new if isinstance(m, RemoveMessage)}
    if not removals:
        return []
    old = state.get("messages") or []
    if REMOVE_ALL_MESSAGES in removals:
        kept = {m.id for m in new if not isinstance(m, RemoveMessage) and m.id}
        return [m for m in old if m.id is None or m.id not in kept]
    return [m for m in old if m.id in removals]


def _mark_summaries(state: Mapping[str, Any], update: Mapping[str, Any]) -> None:
    """Tag the messages ``update`` adds (the summary) as LangChain >= 1.2 does, so that
    :class:`MemoryMiddleware` leaves them out of the conversation on every version."""
    old_ids = {m.id for m in state.get("messages") or [] if m.id}
    for message in update.get("messages") or []:
        if not isinstance(message, RemoveMessage) and (not message.id or message.id not in old_ids):
            message.additional_kwargs.setdefault("lc_source", "summarization")


class MemorySummarizationMiddleware(SummarizationMiddleware):
    """LangChain's ``SummarizationMiddleware`` that hands the messages it is about to drop to
    ``service.before_summarization`` first (DeerFlow's summarization flush hook).

    Takes the service and the id options of :class:`MemoryMiddleware`; every other argument
    goes to ``SummarizationMiddleware`` unchanged. The hand-off happens after the summary is
    written and before the update that removes the messages is returned, so a failed summary
    flushes nothing (nothing is dropped either). Never raises more than
    ``SummarizationMiddleware`` itself does.
    """

    def __init__(
        self,
        service: MemoryService,
        model: Any,
        *,
        agent_name: str | None = None,
        thread_id_key: str = "thread_id",
        user_id_key: str = "user_id",
        tenant_id_key: str = "tenant_id",
        agent_name_key: str = "agent_name",
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.service = service
        self._ids = _IdReader(
            agent_name=agent_name,
            thread_id_key=thread_id_key,
            user_id_key=user_id_key,
            tenant_id_key=tenant_id_key,
            agent_name_key=agent_name_key,
        )

    def before_model(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        update = super().before_model(state, runtime)
        try:
            dropped = _dropped(state, update)
            if dropped and update is not None:
                _mark_summaries(state, update)
                _flush(self.service, dropped, self._ids.read(runtime))
        except Exception:
            logger.exception("memory: before_summarization hand-off failed; messages not queued")
        return update

    async def abefore_model(
        self, state: AgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        update = await super().abefore_model(state, runtime)
        try:
            dropped = _dropped(state, update)
            if dropped and update is not None:
                _mark_summaries(state, update)
                ids = self._ids.read(runtime)
                await asyncio.to_thread(_flush, self.service, dropped, ids)
        except Exception:
            logger.exception("memory: before_summarization hand-off failed; messages not queued")
        return update
