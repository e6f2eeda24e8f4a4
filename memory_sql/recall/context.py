"""The memory block for the next conversation, chosen for it when there is a query.

:class:`Recall` renders a loaded memory within the config's budgets. Without a query the facts
come by category and confidence (:mod:`memory_sql.recall.injection`); with one (the turn about
to be answered, or the conversation so far), the database's full-text index finds the facts
that share its terms and :mod:`memory_sql.recall.ranking` orders them; those that fit the budget
are counted as shown (:mod:`memory_sql.recall.heat`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from ..config import RecallSettings
from ..models import MemoryDocument
from ..scope import Scope
from ..storage import MemoryStorage
from ..text_search import query_terms
from ..tokens import TokenCounter
from .heat import AccessHeat
from .injection import FactLines, fact_lines, format_memory, wrap_block
from .ranking import RankingWeights, expansion_terms, merge_matches, query_text, rank_facts

Query = str | Iterable[Any]
"""A query: text, or the messages of a conversation (its last user turns are used)."""


class Recall:
    """Renders memories for prompts with the budgets and weights of ``settings`` (the config's
    ``recall`` section); shown facts' heat goes to ``storage`` in the background. Safe to share
    between threads."""

    def __init__(
        self, settings: RecallSettings, storage: MemoryStorage, counter: TokenCounter
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.counter = counter
        self.weights = RankingWeights(
            relevance=settings.relevance_weight,
            confidence=settings.confidence_weight,
            recency=settings.recency_weight,
            recency_half_life_days=settings.recency_half_life_days,
            duplicate_overlap=settings.duplicate_overlap,
            candidates=settings.candidates,
            expansion=settings.expansion_weight,
            expansion_facts=settings.expansion_facts,
        )
        self.heat = AccessHeat(storage, settings.heat_flush_seconds)

    def ranking(self, doc: MemoryDocument, scope: Scope, query: Query) -> list[str]:
        """The ids of ``doc``'s facts that match ``query``, best first (empty: none match).

        Raises:
            InvalidMessageError: ``query`` holds a malformed message.
            StorageError: the index could not be read.
        """
        return self._ranking(doc, scope, query, self._lines(doc))

    def _ranking(
        self, doc: MemoryDocument, scope: Scope, query: Query, lines: FactLines
    ) -> list[str]:
        terms = query_terms(query_text(query))
        if not terms or not doc.facts:
            return []
        limit = self.weights.candidates
        matches = self.storage.match_facts(doc, scope, terms, limit=limit)
        weight = self.weights.expansion
        if matches and weight > 0:
            extra = expansion_terms(matches, lines, terms, self.weights.expansion_facts)
            if extra:
                found = self.storage.match_facts(doc, scope, extra, limit=limit)
                matches = merge_matches(matches, found, weight)
        return rank_facts(lines.facts_by_id, matches, self.weights, terms=lines.terms)

    def _lines(self, doc: MemoryDocument) -> FactLines:
        return fact_lines(doc, self.settings.guaranteed_categories, self.counter)

    def render(
        self,
        doc: MemoryDocument,
        scope: Scope,
        *,
        query: Query | None = None,
        today: date | None = None,
    ) -> str:
        """``doc`` (the memory of ``scope``) as the prompt's block, ``""`` when it has nothing
        to show; with ``query``, the facts outside the guaranteed categories are the query's
        best matches first.

        Raises:
            InvalidMessageError: ``query`` holds a malformed message.
            StorageError: the index could not be read.
        """
        ranking = None
        lines = self._lines(doc)
        if query is not None:
            ranking = self._ranking(doc, scope, query, lines)
        settings = self.settings
        formatted = format_memory(
            doc,
            settings.injected_memory_max_tokens,
            settings.guaranteed_categories,
            settings.guaranteed_token_budget,
            self.counter,
            ranking=ranking,
            lines=lines,
        )
        if ranking:
            matched = set(ranking)
            self.heat.record(scope, [fact_id for fact_id in formatted.shown if fact_id in matched])
        return wrap_block(formatted.text, today)

    def close(self) -> None:
        """Write the access heat still held."""
        self.heat.close()
