"""The memory LLM of the DeerFlow backend: the host's chat model, and the host's callbacks.

The updater asks its LLM through one method, ``complete(messages, **options) -> Completion``
(:class:`memory_sql.update.llm.LLMClient`), and reads ``model`` (for the "no model" warning) and
``close()``. Two things here have that interface:

- :class:`HostChatModel` wraps the host's default LangChain chat model (whatever
  ``host_llm_factory()`` returns: any provider DeerFlow supports), so a DeerFlow user needs no
  model settings for memory. The prompt goes to ``model.invoke(messages, config=…)`` as
  role/content dicts; the reply's text (a string, or the text of its content blocks) and its
  token usage (``usage_metadata``, else ``response_metadata["token_usage"]``) make the
  :class:`~memory_sql.update.llm.Completion`, so that ``UpdateResult`` and the usage reports count
  it like any other call. Any exception of the model becomes an
  :class:`~memory_sql.LLMError`, which the updater records as a failed run (retried).
  Structured-output options the updater passes (``schema``) are not sent: the prompt asks for
  JSON, and the reply parser finds it in whatever the model wraps it with.
- :class:`ObservedLLM` calls the host's ``callbacks`` around each call of either client, as
  DeerFlow's own backend does: ``on_memory_llm_call(invoke_config, thread_id=, user_id=,
  trace_id=, model_name=)`` before (it may add tracing metadata to ``invoke_config``, which
  then goes to the host model's ``invoke``), ``on_memory_llm_result(invoke_config, prompt=,
  response=, error=, duration_ms=, model_name=)`` after, on success and on failure. A
  callback that raises is logged and does not affect the update; a callbacks object without
  one of the methods is fine.

The ids the callbacks get come from :data:`CURRENT_UPDATE`, which the backend sets around each
queued update it runs (thread, user, agent, and the trace id of the thread's latest ``add`` in
this process, if any).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ...config import MemoryConfig
from ...errors import ConfigError, LLMError
from ...update.llm import Completion, LLMClient

logger = logging.getLogger(__name__)

RUN_NAME = "memory_agent"


@dataclass(frozen=True)
class UpdateContext:
    """Which memory update an LLM call belongs to."""

    thread_id: str | None
    user_id: str | None
    agent_name: str | None
    trace_id: str | None


CURRENT_UPDATE: ContextVar[UpdateContext | None] = ContextVar(
    "memory_sql_deerflow_update", default=None
)


class HostChatModel:
    """The host's chat model behind the interface of :class:`memory_sql.update.llm.LLMClient`."""

    def __init__(self, chat_model: Any) -> None:
        if not callable(getattr(chat_model, "invoke", None)):
            raise TypeError(f"the host's chat model {chat_model!r} has no invoke()")
        self.chat_model = chat_model
        self.model = model_name(chat_model)

    def __repr__(self) -> str:
        return f"HostChatModel({type(self.chat_model).__name__}, model={self.model!r})"

    def invoke(self, messages: Sequence[dict[str, str]], config: dict[str, Any]) -> Any:
        """The model's raw reply to ``messages``.

        Raises:
            LLMError: the model raised.
        """
        try:
            return self.chat_model.invoke([dict(m) for m in messages], config=config)
        except Exception as exc:
            raise LLMError(
                f"the host's chat model {self.model} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def completion(self, reply: Any) -> Completion:
        """``reply`` (what :meth:`invoke` returned) as a :class:`Completion`.

        Raises:
            LLMError: the reply holds no text.
        """
        text = reply_text(getattr(reply, "content", reply))
        if not text.strip():
            raise LLMError(f"the host's chat model {self.model} answered no text")
        prompt_tokens, completion_tokens = _usage(reply)
        metadata = getattr(reply, "response_metadata", None) or {}
        answered_by = metadata.get("model_name") or metadata.get("model") or self.model
        return Completion(
            text=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model=str(answered_by),
        )

    def complete(self, messages: list[dict[str, str]], **options: Any) -> Completion:
        """The model's answer to ``messages``; ``options`` (``schema``) are not sent.

        Raises:
            LLMError: the model raised or answered no text.
        """
        return self.completion(self.invoke(messages, {"run_name": RUN_NAME}))

    def close(self) -> None:
        """Nothing to close: the host owns its model."""


class ObservedLLM:
    """``inner`` (an :class:`LLMClient` or a :class:`HostChatModel`) with the host's callbacks
    called around each call (see the module docstring)."""

    def __init__(self, inner: Any, callbacks: Any) -> None:
        self.inner = inner
        self.callbacks = callbacks

    def __repr__(self) -> str:
        return f"ObservedLLM({self.inner!r})"

    @property
    def model(self) -> str | None:
        model: str | None = self.inner.model  # the host's model or an LLMClient
        return model

    def complete(self, messages: list[dict[str, str]], **options: Any) -> Completion:
        context = CURRENT_UPDATE.get() or UpdateContext(None, None, None, None)
        invoke_config: dict[str, Any] = {"run_name": RUN_NAME}
        self._notify(
            "on_memory_llm_call",
            invoke_config,
            thread_id=context.thread_id,
            user_id=context.user_id,
            trace_id=context.trace_id,
            model_name=self.model,
        )
        started = time.monotonic()
        try:
            if isinstance(self.inner, HostChatModel):
                response: Any = self.inner.invoke(messages, invoke_config)
            else:
                response = self.inner.complete(messages, **options)
        except BaseException as exc:
            self._result(invoke_config, messages, None, exc, started)
            raise
        self._result(invoke_config, messages, response, None, started)
        if isinstance(self.inner, HostChatModel):
            return self.inner.completion(response)
        completion: Completion = response
        return completion

    def close(self) -> None:
        self.inner.close()

    def _result(
        self,
        invoke_config: dict[str, Any],
        prompt: Any,
        response: Any,
        error: BaseException | None,
        started: float,
    ) -> None:
        self._notify(
            "on_memory_llm_result",
            invoke_config,
            prompt=prompt,
            response=response,
            error=error,
            duration_ms=(time.monotonic() - started) * 1000,
            model_name=self.model,
        )

    def _notify(self, name: str, invoke_config: dict[str, Any], **kwargs: Any) -> None:
        hook = getattr(self.callbacks, name, None)
        if hook is None:
            return
        try:
            hook(invoke_config, **kwargs)
        except Exception:
            logger.warning(
                "memory_sql: the host's %s callback failed (ignored)", name, exc_info=True
            )


def model_name(chat_model: Any) -> str:
    """The name a LangChain chat model goes by (``model_name``, ``model``, …, else its class)."""
    for attribute in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(chat_model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(chat_model).__name__


def reply_text(content: Any) -> str:
    """The text of a chat reply's ``content``: a string, or the text of its content blocks
    (strings and ``{"type": "text", "text": …}`` dicts; reasoning and tool blocks skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type", "text") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return "" if content is None else str(content)


def _usage(reply: Any) -> tuple[int, int]:
    usage = getattr(reply, "usage_metadata", None)
    if isinstance(usage, dict):
        return _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
    metadata = getattr(reply, "response_metadata", None)
    token_usage = metadata.get("token_usage") if isinstance(metadata, dict) else None
    if isinstance(token_usage, dict):
        return _count(token_usage.get("prompt_tokens")), _count(
            token_usage.get("completion_tokens")
        )
    return 0, 0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def choose_llm(
    config: MemoryConfig, *, own_llm: bool, host_llm_factory: Any, callbacks: Any
) -> Any:
    """The LLM client the backend's updater uses.

    memory_sql's OpenAI-compatible client when ``own_llm`` (``backend_config`` names its
    settings); else the host's default chat model when ``host_llm_factory`` gives one; else
    that client all the same, with the ``OPENAI_*`` fallbacks (and, with no model anywhere,
    the service's warning). Wrapped in :class:`ObservedLLM` when the host passed
    ``callbacks``.

    Raises:
        ConfigError: the host's factory gave an object that is not a chat model.
    """
    inner: Any = None
    if not own_llm and host_llm_factory is not None:
        try:
            chat_model = host_llm_factory()
        except Exception:
            logger.warning(
                "memory_sql: the host's default chat model could not be built; memory updates "
                "use model_name / OPENAI_MODEL instead",
                exc_info=True,
            )
            chat_model = None
        if chat_model is not None:
            try:
                inner = HostChatModel(chat_model)
            except TypeError as exc:
                raise ConfigError(f"host_llm_factory: {exc}") from None
            logger.info("memory_sql: memory updates use the host's chat model %s", inner.model)
    if inner is None:
        inner = LLMClient.from_config(config)
    return ObservedLLM(inner, callbacks) if callbacks is not None else inner
