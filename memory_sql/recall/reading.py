"""Reading a memory as a service offers it: the stored document, and the block for a prompt.

:class:`MemoryReading` is mixed into :class:`memory_sql.MemoryService`, which gives it its
``config``, ``storage``, :class:`~memory_sql.recall.context.Recall` and the ``_problem`` log
(what an agent-facing call that must not raise counts and logs instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime
from typing import Any

from ..config import MemoryConfig
from ..models import MemoryDocument
from ..scope import Scope
from ..storage import MemoryStorage
from ..tenancy import acting_for
from .context import Recall


class MemoryReading:
    """The stored memory and its prompt block, for an object holding ``config``, ``storage``,
    ``recall`` and ``_problem``."""

    config: MemoryConfig
    storage: MemoryStorage
    recall: Recall
    _problem: Callable[..., None]

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
        recall: Recall | None = None,
    ) -> str:
        """``doc`` as :meth:`memory_context` renders it, with this service's token budget and
        guaranteed categories (``""`` when memory is off), for a caller that loaded it (the
        memory of ``scope``, needed with a ``query``). ``recall``: another than the service's
        (one reading a replica's full-text index).

        Raises:
            InvalidMessageError: ``query`` holds a malformed message.
            StorageError: the full-text index could not be read.
        """
        if not self.config.enabled:
            return ""
        if query is not None and scope is None:
            raise ValueError("render_context: a query needs the memory's scope")
        chosen = recall if recall is not None else self.recall
        return chosen.render(doc, scope or Scope.of(), query=query, today=today)
