"""Stand-in for ``deerflow.agents.memory.manager``: the pluggable memory contract.

Written from the facts in ``shared/reference/deerflow-backend-contract.md``: a pydantic v2
``MemoryManager`` base (``arbitrary_types_allowed``) with the fields ``backend_config``,
``mode`` and ``callbacks``, the class variables ``supports_search`` and
``requires_passive_writes_in_tool_mode`` (checked by a model validator), the abstract tier-1
methods and ``from_config``, the tier-2 and tier-3 defaults, the async twins, the three error
classes, and the host's factory: ``manager_class`` a registered short name or a dotted path
(``pkg.mod:Cls`` or ``pkg.mod.Cls``) to a ``MemoryManager`` subclass, else a ``ValueError``;
``storage_path`` put into ``backend_config``; ``from_config(backend_config, mode=…,
**host_hooks)``.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class MemoryCallbacks:
    """Host observability hooks around each memory LLM call; both may be ignored."""

    def on_memory_llm_call(
        self,
        invoke_config: dict[str, Any],
        *,
        thread_id: str | None,
        user_id: str | None,
        trace_id: str | None,
        model_name: str | None,
    ) -> None:
        """Before the call: may add tracing metadata to ``invoke_config``."""

    def on_memory_llm_result(
        self,
        invoke_config: dict[str, Any],
        *,
        prompt: Any,
        response: Any,
        error: BaseException | None,
        duration_ms: float,
        model_name: str | None,
    ) -> None:
        """After the call, on success and on failure."""


class MemoryManagerError(RuntimeError):
    """Backend-neutral base error at the MemoryManager boundary."""


class MemoryConflictError(MemoryManagerError):
    """A write lost an optimistic-concurrency race."""


class MemoryCorruptionError(MemoryManagerError):
    """Stored memory cannot be read."""


class MemoryManager(BaseModel):
    """The contract every memory backend implements."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend_config: dict[str, Any] = Field(default_factory=dict)
    mode: Literal["middleware", "tool"] = "middleware"
    callbacks: MemoryCallbacks | None = None

    supports_search: ClassVar[bool] = False
    requires_passive_writes_in_tool_mode: ClassVar[bool] = False

    @field_validator("backend_config", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return value or {}

    @model_validator(mode="after")
    def _invariants(self) -> MemoryManager:
        overridden = type(self).search is not MemoryManager.search
        if type(self).supports_search != overridden:
            raise ValueError(
                f"{type(self).__name__}.supports_search={type(self).supports_search} but "
                f"search() is {'overridden' if overridden else 'not overridden'}"
            )
        if self.mode == "tool" and not overridden:
            raise ValueError(f"mode='tool' needs a backend with search(); {type(self).__name__}")
        return self

    # Tier 1 ------------------------------------------------------------------------------

    @abstractmethod
    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None: ...

    @abstractmethod
    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
    ) -> str: ...

    @classmethod
    @abstractmethod
    def from_config(
        cls,
        backend_config: dict[str, Any],
        *,
        mode: Literal["middleware", "tool"] = "middleware",
        **host_hooks: Any,
    ) -> MemoryManager: ...

    # Tier 2 ------------------------------------------------------------------------------

    def add_nowait(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> None:
        self.add(thread_id, messages, agent_name=agent_name, user_id=user_id)

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        raise NotImplementedError(f"search not supported by {type(self).__name__}")

    def get_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError(f"get_memory not supported by {type(self).__name__}")

    def delete_memory(self, *, user_id: str | None = None, agent_name: str | None = None) -> None:
        raise NotImplementedError(f"delete_memory not supported by {type(self).__name__}")

    def clear_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError(f"clear_memory not supported by {type(self).__name__}")

    def import_memory(
        self,
        memory_data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> dict[str, Any]:
        raise NotImplementedError(f"import_memory not supported by {type(self).__name__}")

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError(f"export_memory not supported by {type(self).__name__}")

    def shutdown_flush(self, timeout: float) -> bool:
        return True

    # Tier 3 ------------------------------------------------------------------------------

    def warm(self) -> bool | None:
        return None

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError(f"reload_memory not supported by {type(self).__name__}")

    def create_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        raise NotImplementedError(f"create_fact not supported by {type(self).__name__}")

    def delete_fact(
        self, fact_id: str, *, agent_name: str | None = None, user_id: str | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError(f"delete_fact not supported by {type(self).__name__}")

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
        raise NotImplementedError(f"update_fact not supported by {type(self).__name__}")

    def on_pre_compress(self, messages: list[Any]) -> str:
        return ""

    def on_turn_start(self, turn_number: int, message: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None

    # Async twins -------------------------------------------------------------------------

    async def aadd(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        return self.add(
            thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id
        )

    async def aget_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
    ) -> str:
        return self.get_context(user_id, agent_name=agent_name, thread_id=thread_id)

    async def asearch(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        return self.search(query, top_k, user_id=user_id, agent_name=agent_name, category=category)


class NoopMemoryManager(MemoryManager):
    """A registered backend that remembers nothing (the factory's short-name path)."""

    def add(self, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
        return None

    def get_context(self, user_id: str | None, **kwargs: Any) -> str:
        return ""

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: Any = "middleware", **host_hooks: Any
    ) -> NoopMemoryManager:
        return cls(backend_config=backend_config, mode=mode)


REGISTERED_BACKENDS: dict[str, type[MemoryManager]] = {"noop": NoopMemoryManager}


def resolve_manager_class(
    manager_class: str, registry: Mapping[str, type[MemoryManager]] | None = None
) -> type[MemoryManager]:
    """The backend class ``manager_class`` names: a registered short name, else a dotted path
    ``pkg.mod:Cls`` or ``pkg.mod.Cls`` to a ``MemoryManager`` subclass. Never a fallback.

    Raises:
        ValueError: anything else, saying why.
    """
    registry = REGISTERED_BACKENDS if registry is None else registry
    if manager_class in registry:
        return registry[manager_class]
    if ":" in manager_class:
        module_path, _, attr = manager_class.partition(":")
    else:
        module_path, _, attr = manager_class.rpartition(".")
    problem = "not a dotted path"
    if module_path and attr:
        try:
            module = importlib.import_module(module_path)
        except ImportError as exc:
            problem = f"cannot import module {module_path!r}: {exc}"
        else:
            cls = getattr(module, attr, None)
            if cls is None:
                problem = f"attribute {attr!r} not found in {module_path!r}"
            elif not (isinstance(cls, type) and issubclass(cls, MemoryManager)):
                problem = f"{manager_class!r} resolved to non-MemoryManager {cls!r}"
            else:
                return cls
    raise ValueError(
        f"memory.manager_class={manager_class!r} is not a registered backend "
        f"(known: {sorted(registry)}) nor a resolvable 'pkg.mod:Cls' path: {problem}"
    )


def should_keep_hidden_message(additional_kwargs: Any) -> bool:
    """The host's default: keep a hidden message only if it answers a clarification."""
    return isinstance(additional_kwargs, Mapping) and "human_input_response" in additional_kwargs


@contextmanager
def trace_context(trace_id: str | None = None) -> Any:
    yield


def default_host_hooks(host_llm_factory: Callable[[], Any] | None = None) -> dict[str, Any]:
    """The hooks the host passes to ``from_config`` (a backend takes what it needs)."""
    return {
        "callbacks": MemoryCallbacks(),
        "should_keep_hidden_message": should_keep_hidden_message,
        "trace_context_manager": trace_context,
        "host_llm_factory": host_llm_factory,
        "extraction_callback": lambda payload: None,
    }


def build_memory_manager(
    memory: Mapping[str, Any],
    *,
    runtime_home: str | Path,
    host_hooks: Mapping[str, Any] | None = None,
) -> MemoryManager:
    """What the host does at startup with its ``memory:`` section: resolve ``manager_class``,
    put an absolute ``storage_path`` into ``backend_config`` (missing: ``runtime_home``;
    relative: resolved against it), and call ``from_config``."""
    cls = resolve_manager_class(str(memory.get("manager_class", "noop")))
    backend_config = dict(memory.get("backend_config") or {})
    home = Path(runtime_home)
    storage_path = backend_config.get("storage_path")
    if not storage_path:
        backend_config["storage_path"] = str(home)
    elif not Path(storage_path).is_absolute():
        backend_config["storage_path"] = str((home / storage_path).resolve())
    hooks = dict(default_host_hooks() if host_hooks is None else host_hooks)
    return cls.from_config(backend_config, mode=memory.get("mode", "middleware"), **hooks)
