"""Where the MCP tools find memory: in this process (:class:`LocalMemory`, the service's own
storage, or a local database of ``memory-sql mcp``) or behind a memory service
(:class:`RemoteMemory`, through :class:`~memory_sql.client.MemoryClient`).

Both answer with the client's result models, and raise the library's exceptions; both act
for one tenant only, fixed when they are made.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from .. import ops
from ..client import MemoryClient, NotFound
from ..client.results import Context, EventPage, FactChange, FactPage, Queued, StoredFact
from ..errors import CapabilityMissingError, ConfigError, FactNotFoundError
from ..intake.guard import redacted_document
from ..models import MemoryDocument
from ..ops import history
from ..scope import Scope
from ..server.routes.conversations import checked_messages, queue_checked
from ..service import MemoryService
from ..storage.capabilities import Capability, require
from ..tenancy import acting_for


class Memory(Protocol):
    """What the tools need of a memory store, for one tenant."""

    def context(self, user_id: str, agent_name: str | None, query: str | None) -> Context: ...

    def search(
        self,
        user_id: str,
        agent_name: str | None,
        query: str | None,
        category: str | None,
        min_confidence: float | None,
        limit: int,
    ) -> FactPage: ...

    def add_fact(
        self,
        user_id: str,
        agent_name: str | None,
        content: str,
        category: str,
        confidence: float,
        version: int | None,
    ) -> FactChange: ...

    def update_fact(
        self,
        user_id: str,
        agent_name: str | None,
        fact_id: str,
        version: int | None,
        changes: dict[str, Any],
    ) -> FactChange: ...

    def delete_fact(
        self, user_id: str, agent_name: str | None, fact_id: str, version: int | None
    ) -> FactChange: ...

    def remember(
        self,
        user_id: str,
        agent_name: str | None,
        thread_id: str,
        messages: list[dict[str, Any]],
        immediate: bool,
    ) -> Queued: ...

    def memory(self, user_id: str, agent_name: str | None) -> MemoryDocument: ...

    def history(
        self, user_id: str, agent_name: str | None, fact_id: str, after: str | None, limit: int
    ) -> EventPage: ...


class LocalMemory:
    """Memory in this process: ``service``'s storage (SQL), acting for ``tenant_id`` (its
    connections see only that tenant's rows under PostgreSQL row-level security)."""

    def __init__(self, service: MemoryService, tenant_id: str) -> None:
        storage = service.storage
        try:
            # Its search and history tools are operations: a storage without them is refused
            # when the server starts, not at the first call.
            require(storage, Capability.OPERATIONS, needed_by="the MCP server")
        except CapabilityMissingError as exc:
            raise ConfigError(
                f"{exc} (storage is {service.config.storage!r})", key="storage"
            ) from exc
        self.service = service
        self.storage = storage
        self.tenant_id = Scope.of(tenant_id=tenant_id).tenant_id

    def _acting(self) -> AbstractContextManager[None]:
        return acting_for(self.tenant_id)

    def _scope(self, user_id: str, agent_name: str | None) -> Scope:
        return Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=self.tenant_id)

    def _change(self, scope: Scope, change: ops.FactChange) -> FactChange:
        record = ops.FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, change.fact)
        return FactChange(fact=StoredFact(**record.to_dict()), version=change.version)

    def context(self, user_id: str, agent_name: str | None, query: str | None) -> Context:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            doc = self.storage.load(**scope.arguments())
            block = self.service.render_context(doc, scope=scope, query=query)
        return Context(context=block, version=doc.version)

    def search(
        self,
        user_id: str,
        agent_name: str | None,
        query: str | None,
        category: str | None,
        min_confidence: float | None,
        limit: int,
    ) -> FactPage:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            records = ops.search_facts(
                self.storage,
                query,
                category=category,
                min_confidence=min_confidence,
                tenant_id=scope.tenant_id,
                user_id=scope.user_id,
                agent_name=None if agent_name is None else scope.agent_key,
                limit=limit,
                recall=self.service.recall,
            )
        facts = [StoredFact(**record.to_dict()) for record in records]
        return FactPage(facts=facts, next_offset=None)

    def add_fact(
        self,
        user_id: str,
        agent_name: str | None,
        content: str,
        category: str,
        confidence: float,
        version: int | None,
    ) -> FactChange:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            change = ops.add_fact(
                self.storage,
                content,
                category=category,
                confidence=confidence,
                source_thread_id="manual",
                **scope.arguments(),
                expected_version=version,
            )
        return self._change(scope, change)

    def update_fact(
        self,
        user_id: str,
        agent_name: str | None,
        fact_id: str,
        version: int | None,
        changes: dict[str, Any],
    ) -> FactChange:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            change = ops.update_fact(
                self.storage, fact_id, **scope.arguments(), expected_version=version, **changes
            )
        return self._change(scope, change)

    def delete_fact(
        self, user_id: str, agent_name: str | None, fact_id: str, version: int | None
    ) -> FactChange:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            change = ops.remove_fact(
                self.storage, fact_id, **scope.arguments(), expected_version=version
            )
        return self._change(scope, change)

    def remember(
        self,
        user_id: str,
        agent_name: str | None,
        thread_id: str,
        messages: list[dict[str, Any]],
        immediate: bool,
    ) -> Queued:
        scope = self._scope(user_id, agent_name)
        kept = checked_messages(messages, self.service.config.server)
        with self._acting():
            answer = queue_checked(
                self.service,
                kept,
                thread_id=thread_id,
                user_id=scope.user_id,
                agent_name=scope.agent_name,
                tenant_id=scope.tenant_id,
                immediate=immediate,
            )
        return Queued(**answer)

    def memory(self, user_id: str, agent_name: str | None) -> MemoryDocument:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            return redacted_document(self.storage.load(**scope.arguments()))

    def history(
        self, user_id: str, agent_name: str | None, fact_id: str, after: str | None, limit: int
    ) -> EventPage:
        scope = self._scope(user_id, agent_name)
        with self._acting():
            events, cursor = history.change_log(
                self.storage, scope, fact_id=fact_id, after=after, limit=limit
            )
        if not events and after is None:
            raise FactNotFoundError(str(scope), fact_id)
        return EventPage.model_validate({"events": events, "next": cursor})


class RemoteMemory:
    """Memory behind a memory service, reached with ``client`` (whose key names the tenant)."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client

    def context(self, user_id: str, agent_name: str | None, query: str | None) -> Context:
        return self.client.context(user_id, agent_name=agent_name, query=query)

    def search(
        self,
        user_id: str,
        agent_name: str | None,
        query: str | None,
        category: str | None,
        min_confidence: float | None,
        limit: int,
    ) -> FactPage:
        try:
            return self.client.list_facts(
                user_id,
                agent_name=agent_name,
                q=query,
                category=category,
                min_confidence=min_confidence,
                limit=limit,
            )
        except NotFound:  # no memory of the user: no facts, as in this process
            return FactPage(facts=[], next_offset=None)

    def add_fact(
        self,
        user_id: str,
        agent_name: str | None,
        content: str,
        category: str,
        confidence: float,
        version: int | None,
    ) -> FactChange:
        return self.client.add_fact(
            user_id,
            content,
            category=category,
            confidence=confidence,
            source_thread_id="manual",
            agent_name=agent_name,
            version=version,
        )

    def update_fact(
        self,
        user_id: str,
        agent_name: str | None,
        fact_id: str,
        version: int | None,
        changes: dict[str, Any],
    ) -> FactChange:
        return self.client.update_fact(
            user_id, fact_id, agent_name=agent_name, version=version, **changes
        )

    def delete_fact(
        self, user_id: str, agent_name: str | None, fact_id: str, version: int | None
    ) -> FactChange:
        return self.client.delete_fact(user_id, fact_id, agent_name=agent_name, version=version)

    def remember(
        self,
        user_id: str,
        agent_name: str | None,
        thread_id: str,
        messages: list[dict[str, Any]],
        immediate: bool,
    ) -> Queued:
        return self.client.queue_conversation(
            user_id, messages, thread_id=thread_id, agent_name=agent_name, immediate=immediate
        )

    def memory(self, user_id: str, agent_name: str | None) -> MemoryDocument:
        try:
            return self.client.get_memory(user_id, agent_name=agent_name)
        except NotFound:  # never saved: the empty memory at version 0, as in this process
            return MemoryDocument()

    def history(
        self, user_id: str, agent_name: str | None, fact_id: str, after: str | None, limit: int
    ) -> EventPage:
        return self.client.fact_history(
            user_id, fact_id, agent_name=agent_name, after=after, limit=limit
        )
