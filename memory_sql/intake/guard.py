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

from typing import Any

from ..errors import InstructionFactError
from ..models import USER_SECTIONS, Fact, MemoryDocument, Section, copy_model
from ..scope import Scope
from .instructions import instruction_in
from .redact import DEFAULT, Redactor, count_redactions


class MemoryGuard:
    """Redacts what a save writes (``redactor``) and refuses instructions (``instructions``:
    refuse them; False lets them through, for a store that only holds trusted text)."""

    def __init__(self, redactor: Redactor = DEFAULT, *, instructions: bool = True) -> None:
        self.redactor = redactor
        self.instructions = instructions

    def text(self, scope: Scope, text: str, counts: dict[str, int] | None = None) -> str:
        """``text`` redacted; what was found is added to ``counts``."""
        result = self.redactor.redact(text)
        if result.counts and counts is not None:
            for kind, number in result.counts.items():
                counts[kind] = counts.get(kind, 0) + number
        return result.text

    def saved(self, scope: Scope, counts: dict[str, int]) -> None:
        """Count what a stored save redacted, for the tenant (``/metrics``)."""
        count_redactions(scope.tenant_id, counts)

    def fact(self, scope: Scope, fact: Fact, counts: dict[str, int] | None = None) -> Fact:
        if self.instructions:
            found = instruction_in(fact.content)
            if found is not None:
                raise InstructionFactError(f"fact {fact.content[:60]!r}", found)
        content = self.text(scope, fact.content, counts)
        error = fact.source_error and self.text(scope, fact.source_error, counts)
        if content == fact.content and error == fact.source_error:
            return fact
        return copy_model(fact, content=content, source_error=error)

    def section(
        self, scope: Scope, name: str, section: Section, counts: dict[str, int] | None = None
    ) -> Section:
        if self.instructions:
            found = instruction_in(section.summary)
            if found is not None:
                raise InstructionFactError(f"the {name} summary", found)
        summary = self.text(scope, section.summary, counts)
        return section if summary == section.summary else copy_model(section, summary=summary)


DEFAULT_GUARD = MemoryGuard()


def redacted_document(doc: MemoryDocument, redactor: Redactor = DEFAULT) -> MemoryDocument:
    """``doc`` as shown to anyone (the API, MCP, the console, an export): its facts and
    sections with secrets replaced, for memory written before redaction existed (defence in
    depth: writes are redacted already). ``doc`` itself is not changed; an unchanged document
    is returned as it is."""
    redact = redactor.redact
    facts = []
    changed = False
    for fact in doc.facts:
        content = redact(fact.content).text
        error = fact.source_error and redact(fact.source_error).text
        if content != fact.content or error != fact.source_error:
            fact = copy_model(fact, content=content, source_error=error)
            changed = True
        facts.append(fact)
    sections = {}
    for name, section in doc.sections().items():
        summary = redact(section.summary).text if section.summary else section.summary
        if summary != section.summary:
            sections[name] = copy_model(section, summary=summary)
    if not changed and not sections:
        return doc
    copy = doc.clone()
    copy.facts = facts
    for name, section in sections.items():
        setattr(copy.user if name in USER_SECTIONS else copy.history, name, section)
    return copy


def redacted_tree(value: Any, redactor: Redactor = DEFAULT) -> Any:
    """``value`` (JSON: dicts, lists, strings) with every string redacted."""
    if isinstance(value, str):
        return redactor.redact(value).text
    if isinstance(value, list):
        return [redacted_tree(item, redactor) for item in value]
    if isinstance(value, dict):
        return {key: redacted_tree(item, redactor) for key, item in value.items()}
    return value
