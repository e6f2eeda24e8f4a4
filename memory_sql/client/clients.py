"""``MemoryClient`` and ``AsyncMemoryClient``: the HTTP API of ``memory-sql serve`` as methods.

Both send the same requests (:mod:`.calls`) and return the same models (:mod:`.results`);
an error answer raises the library's own exception (:mod:`.errors`). Arguments mirror the
routes': ``agent_name`` picks the agent's memory (None: the unnamed agents'), ``version`` is
the memory version a change is based on (sent as ``If-Match``; a stale one raises
:class:`~memory_sql.VersionConflictError`; None applies the change to the newest version).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import httpx

from ..models import MemoryDocument
from . import calls
from .calls import UNSET, Call
from .errors import Unreachable
from .results import (
    Context,
    EventPage,
    FactChange,
    FactPage,
    Forgotten,
    Imported,
    Queued,
    QueueStatus,
    Replaced,
    Requeued,
)

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "MEMORY_SQL_SERVICE_URL"
KEY_ENV = "MEMORY_SQL_API_KEY"
TENANT_HEADER = "X-Memory-Tenant"


def _headers(api_key: str | None, tenant: str | None) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get(KEY_ENV)
    if not key:
        raise ValueError(f"an API key is needed: pass api_key=, or set {KEY_ENV}")
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "memory-sql-client"}
    if tenant is not None:
        headers[TENANT_HEADER] = tenant
    return headers


def _base_url(base_url: str | None) -> str:
    return (base_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def _unreachable(exc: httpx.TransportError, call: Call[Any], base_url: str) -> Unreachable:
    return Unreachable(
        f"cannot reach the memory service at {base_url} ({call.method} {call.path}): "
        f"{type(exc).__name__}: {exc}"
    )


class MemoryClient:
    """The memory service, over HTTP (sync). Use as a context manager, or :meth:`close`.

    ``base_url`` defaults to ``$MEMORY_SQL_SERVICE_URL``, then ``http://127.0.0.1:8080``;
    ``api_key`` to ``$MEMORY_SQL_API_KEY``. ``tenant`` is for an operator key only (sent as
    ``X-Memory-Tenant``). ``transport`` is httpx's, for tests or proxies.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        tenant: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = _base_url(base_url)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_headers(api_key, tenant),
            timeout=timeout,
            transport=transport,
        )

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.send(call.request(self._http))
        except httpx.TransportError as exc:
            raise _unreachable(exc, call, self.base_url) from exc
        return call.answer(response)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        """``/healthz``: the process answers."""
        return self._send(calls.health())

    def ready(self) -> dict[str, Any]:
        """``/readyz``: ready to take conversations: the database answers and is at the schema
        head, or is away while the spool has room (``"database": "unavailable"`` and a
        ``warning``); else ``Unavailable``."""
        return self._send(calls.ready())

    def queue_conversation(
        self,
        user_id: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        thread_id: str,
        agent_name: str | None = None,
        immediate: bool = False,
    ) -> Queued:
        """Queue a finished conversation for the memory update (``immediate``: due now)."""
        return self._send(
            calls.queue_conversation(
                user_id, messages, thread_id=thread_id, agent_name=agent_name, immediate=immediate
            )
        )

    def context(
        self,
        user_id: str,
        *,
        agent_name: str | None = None,
        query: str | None = None,
        messages: Iterable[Mapping[str, Any]] | None = None,
    ) -> Context:
        """The memory block for the system prompt, its facts ranked for ``query`` (the turn
        about to be answered) or ``messages`` (the conversation so far) when given."""
        return self._send(
            calls.context(user_id, agent_name=agent_name, query=query, messages=messages)
        )

    def get_memory(self, user_id: str, *, agent_name: str | None = None) -> MemoryDocument:
        """The memory document, at its version (:class:`NotFound` when there is none)."""
        return self._send(calls.get_memory(user_id, agent_name=agent_name))

    def put_memory(
        self,
        user_id: str,
        memory: MemoryDocument | Mapping[str, Any],
        *,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> Replaced:
        """Make the memory hold this document's sections and facts (DeerFlow's memory.json)."""
        return self._send(calls.put_memory(user_id, memory, agent_name=agent_name, version=version))

    def list_facts(
        self,
        user_id: str,
        *,
        agent_name: str | None = None,
        q: str | None = None,
        category: str | None = None,
        min_confidence: float | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> FactPage:
        """The user's facts: ``q`` through the full-text index (most relevant first), else
        highest confidence first; the unnamed agent's unless ``agent_name`` names one
        (``"*"``: every agent's)."""
        return self._send(
            calls.list_facts(
                user_id,
                agent_name=agent_name,
                q=q,
                category=category,
                min_confidence=min_confidence,
                limit=limit,
                offset=offset,
            )
        )

    def add_fact(
        self,
        user_id: str,
        content: str,
        *,
        category: str = "context",
        confidence: float = 0.9,
        source_thread_id: str | None = None,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> FactChange:
        """Add a fact (:class:`~memory_sql.DuplicateFactError` if its text is stored)."""
        return self._send(
            calls.add_fact(
                user_id,
                content,
                category=category,
                confidence=confidence,
                source_thread_id=source_thread_id,
                agent_name=agent_name,
                version=version,
            )
        )

    def update_fact(
        self,
        user_id: str,
        fact_id: str,
        *,
        content: str = UNSET,
        category: str = UNSET,
        confidence: float = UNSET,
        source_error: str | None = UNSET,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> FactChange:
        """Change the fields given of a fact (:class:`~memory_sql.FactNotFoundError`)."""
        return self._send(
            calls.update_fact(
                user_id,
                fact_id,
                agent_name=agent_name,
                version=version,
                content=content,
                category=category,
                confidence=confidence,
                source_error=source_error,
            )
        )

    def delete_fact(
        self,
        user_id: str,
        fact_id: str,
        *,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> FactChange:
        """Delete a fact; returns it as it was."""
        return self._send(
            calls.delete_fact(user_id, fact_id, agent_name=agent_name, version=version)
        )

    def fact_history(
        self,
        user_id: str,
        fact_id: str,
        *,
        agent_name: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A fact's changes, oldest first."""
        return self._send(
            calls.fact_history(user_id, fact_id, agent_name=agent_name, after=after, limit=limit)
        )

    def changes(
        self,
        user_id: str,
        *,
        agent_name: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> EventPage:
        """The change log of a memory's facts, oldest first."""
        return self._send(calls.changes(user_id, agent_name=agent_name, after=after, limit=limit))

    def forget_user(self, user_id: str) -> Forgotten:
        """Delete everything stored of a user (an admin key)."""
        return self._send(calls.forget_user(user_id))

    def export_jsonl(self) -> str:
        """Every memory of the tenant, as JSON Lines."""
        return self._send(calls.export_jsonl())

    def import_jsonl(self, data: bytes | str) -> Imported:
        """Import JSON Lines of memories into the tenant (idempotent)."""
        return self._send(calls.import_jsonl(data))

    def reports(self, *, days: int = 14, largest: int = 10) -> dict[str, Any]:
        """The tenant's reports: facts by category and confidence, activity, LLM usage."""
        return self._send(calls.reports(days=days, largest=largest))

    def queue_status(
        self, *, failed_only: bool = False, user_id: str | None = None, limit: int = 100
    ) -> QueueStatus:
        """The tenant's queued updates (failed first) and their counts."""
        return self._send(calls.queue_status(failed_only=failed_only, user_id=user_id, limit=limit))

    def retry_updates(self, keys: Iterable[str] | None = None) -> Requeued:
        """Run failed (or the named) updates again, now (an admin key)."""
        return self._send(calls.retry_updates(keys))


class AsyncMemoryClient:
    """The memory service, over HTTP, for asyncio: :class:`MemoryClient`'s methods, awaited.
    Use as an async context manager, or :meth:`aclose`."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        tenant: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = _base_url(base_url)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_headers(api_key, tenant),
            timeout=timeout,
            transport=transport,
        )

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.send(call.request(self._http))
        except httpx.TransportError as exc:
            raise _unreachable(exc, call, self.base_url) from exc
        return call.answer(response)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def health(self) -> dict[str, Any]:
        return await self._send(calls.health())

    async def ready(self) -> dict[str, Any]:
        return await self._send(calls.ready())

    async def queue_conversation(
        self,
        user_id: str,
        messages: Iterable[Mapping[str, Any]],
        *,
        thread_id: str,
        agent_name: str | None = None,
        immediate: bool = False,
    ) -> Queued:
        return await self._send(
            calls.queue_conversation(
                user_id, messages, thread_id=thread_id, agent_name=agent_name, immediate=immediate
            )
        )

    async def context(
        self,
        user_id: str,
        *,
        agent_name: str | None = None,
        query: str | None = None,
        messages: Iterable[Mapping[str, Any]] | None = None,
    ) -> Context:
        return await self._send(
            calls.context(user_id, agent_name=agent_name, query=query, messages=messages)
        )

    async def get_memory(self, user_id: str, *, agent_name: str | None = None) -> MemoryDocument:
        return await self._send(calls.get_memory(user_id, agent_name=agent_name))

    async def put_memory(
        self,
        user_id: str,
        memory: MemoryDocument | Mapping[str, Any],
        *,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> Replaced:
        return await self._send(
            calls.put_memory(user_id, memory, agent_name=agent_name, version=version)
        )

    async def list_facts(
        self,
        user_id: str,
        *,
        agent_name: str | None = None,
        q: str | None = None,
        category: str | None = None,
        min_confidence: float | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> FactPage:
        return await self._send(
            calls.list_facts(
                user_id,
                agent_name=agent_name,
                q=q,
                category=category,
                min_confidence=min_confidence,
                limit=limit,
                offset=offset,
            )
        )

    async def add_fact(
        self,
        user_id: str,
        content: str,
        *,
        category: str = "context",
        confidence: float = 0.9,
        source_thread_id: str | None = None,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> FactChange:
        return await self._send(
            calls.add_fact(
                user_id,
                content,
                category=category,
                confidence=confidence,
                source_thread_id=source_thread_id,
                agent_name=agent_name,
                version=version,
            )
        )

    async def update_fact(
        self,
        user_id: str,
        fact_id: str,
        *,
        content: str = UNSET,
        category: str = UNSET,
        confidence: float = UNSET,
        source_error: str | None = UNSET,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> FactChange:
        return await self._send(
            calls.update_fact(
                user_id,
                fact_id,
                agent_name=agent_name,
                version=version,
                content=content,
                category=category,
                confidence=confidence,
                source_error=source_error,
            )
        )

    async def delete_fact(
        self,
        user_id: str,
        fact_id: str,
        *,
        agent_name: str | None = None,
        version: int | str | None = None,
    ) -> FactChange:
        return await self._send(
            calls.delete_fact(user_id, fact_id, agent_name=agent_name, version=version)
        )

    async def fact_history(
        self,
        user_id: str,
        fact_id: str,
        *,
        agent_name: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> EventPage:
        return await self._send(
            calls.fact_history(user_id, fact_id, agent_name=agent_name, after=after, limit=limit)
        )

    async def changes(
        self,
        user_id: str,
        *,
        agent_name: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> EventPage:
        return await self._send(
            calls.changes(user_id, agent_name=agent_name, after=after, limit=limit)
        )

    async def forget_user(self, user_id: str) -> Forgotten:
        return await self._send(calls.forget_user(user_id))

    async def export_jsonl(self) -> str:
        return await self._send(calls.export_jsonl())

    async def import_jsonl(self, data: bytes | str) -> Imported:
        return await self._send(calls.import_jsonl(data))

    async def reports(self, *, days: int = 14, largest: int = 10) -> dict[str, Any]:
        return await self._send(calls.reports(days=days, largest=largest))

    async def queue_status(
        self, *, failed_only: bool = False, user_id: str | None = None, limit: int = 100
    ) -> QueueStatus:
        return await self._send(
            calls.queue_status(failed_only=failed_only, user_id=user_id, limit=limit)
        )

    async def retry_updates(self, keys: Iterable[str] | None = None) -> Requeued:
        return await self._send(calls.retry_updates(keys))
