"""The rules every write of memory passes: no secret stored, no instruction stored.

:class:`MemoryGuard` is the :class:`~memory_sql.storage.base.WriteGuard` a storage's saves run
new and changed text through (facts' content and ``source_error``, section summaries): secrets
are replaced by typed placeholders (:mod:`memory_sql.intake.redact`) and counted for the
tenant; a fact worded as an instruction to the assistant (:mod:`memory_sql.intake.instructions`)
refuses the save with :class:`~memory_sql.errors.InstructionFactError`. Every writer goes
through a save (the updater, the HTTP API, MCP, import, the CLI), so none can put a secret or
an instruction back. ``memory_sql``'s package installs the default guard on every storage;
:class:`~memory_sql.MemoryService` installs one built from its settings.
"""

from __future__ import annotations

from ..errors import InstructionFactError
from ..models import Fact, Section, copy_model
from ..scope import Scope
from .instructions import instruction_in
from .redact import DEFAULT, Redactor, count_redactions


class MemoryGuard:
    """Redacts what a save writes (``redactor``) and refuses instructions (``instructions``:
    refuse them; False lets them through, for a store that only holds trusted text)."""

    def __init__(self, redactor: Redactor = DEFAULT, *, instructions: bool = True) -> None:
        self.redactor = redactor
        self.instructions = instructions

    def text(self, scope: Scope, text: str) -> str:
        result = self.redactor.redact(text)
        if result.counts:
            count_redactions(scope.tenant_id, result.counts)
        return result.text

    def fact(self, scope: Scope, fact: Fact) -> Fact:
        if self.instructions:
            found = instruction_in(fact.content)
            if found is not None:
                raise InstructionFactError(f"fact {fact.content[:60]!r}", found)
        content = self.text(scope, fact.content)
        error = fact.source_error and self.text(scope, fact.source_error)
        if content == fact.content and error == fact.source_error:
            return fact
        return copy_model(fact, content=content, source_error=error)

    def section(self, scope: Scope, name: str, section: Section) -> Section:
        if self.instructions:
            found = instruction_in(section.summary)
            if found is not None:
                raise InstructionFactError(f"the {name} summary", found)
        summary = self.text(scope, section.summary)
        return section if summary == section.summary else copy_model(section, summary=summary)


DEFAULT_GUARD = MemoryGuard()
