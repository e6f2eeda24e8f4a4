"""Conversations into the queue as a service takes them: through intake, then the spool.

:class:`ConversationQueueing` is mixed into :class:`memory_sql.MemoryService`, which gives it
its ``config``, intake's ``_patterns`` and ``redactor``, the ``queue`` and the ``spool`` in
front of it. What intake redacted is counted for the tenant
(:mod:`memory_sql.intake.tally`) even when nothing is left to learn from.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..config import MemoryConfig
from ..intake import KeptConversation, take_conversation
from ..intake.redact import Redactor
from ..intake.tally import tally_intake_redactions
from ..pattern_files import PatternSet
from ..scope import Scope, check_thread_id
from .pending import UpdateQueue
from .spool import Spool


class ConversationQueueing:
    """Conversations taken in and queued, for an object holding ``config``, ``_patterns``,
    ``redactor``, ``queue`` and ``spool``."""

    config: MemoryConfig
    _patterns: PatternSet
    redactor: Redactor
    queue: UpdateQueue
    spool: Spool

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
            tally_intake_redactions(self.queue.engine, scope.tenant_id, kept.redactions)
        if not kept.learnable:
            return False
        return self.spool.add(scope, thread_id, kept.turns, kept.signals, immediate=immediate)
