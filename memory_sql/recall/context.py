"""The memory block for the next conversation, chosen for it when there is a query.

:class:`Recall` renders a loaded memory within the config's budgets. Without a query the facts
come by category and confidence (:mod:`memory_sql.recall.injection`); with one (the turn about
to be answered, or the conversation so far), the database's full-text index finds the facts
that share its terms and :mod:`memory_sql.recall.ranking` orders them; those that fit the budget
are counted as shown (:mod:`memory_sql.recall.heat`).

With an :class:`~memory_sql.embeddings.Embedder` and the facts' vectors
(:class:`~memory_sql.storage.vectors.FactVectors`), the ranking is hybrid: the query is
embedded once (within ``embedding_query_timeout_seconds``), the memory's facts most similar to
it join the text matches as candidates, and the two lists are fused
(:func:`~memory_sql.recall.ranking.fuse`) before confidence, recency and the near-duplicate
spread. A query whose embedding fails or is late is ranked lexically (counted in the
embedder's stats); a fact without a vector yet is ranked by its text alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date
from typing import Any

from ..config import RecallSettings
from ..embeddings import Embedder
from ..errors import StorageError
from ..models import MemoryDocument
from ..scope import Scope
from ..storage import MemoryStorage
from ..storage.dialects import dialect_of
from ..storage.memory_terms import FTS5, OKAPI, MemoryTerms
from ..storage.vectors import FactVectors
from ..text_search import query_terms
from ..tokens import TokenCounter
from .heat import AccessHeat
from .injection import FactLines, fact_lines, format_memory, wrap_block
from .ranking import (
    RankingWeights,
    expansion_terms,
    fuse,
    fuse_more,
    merge_matches,
    query_text,
    rank_facts,
    vector_matches,
)

logger = logging.getLogger(__name__)

Query = str | Iterable[Any]
"""A query: text, or the messages of a conversation (its last user turns are used)."""


class Recall:
    """Renders memories for prompts with the budgets and weights of ``settings`` (the config's
    ``recall`` section); shown facts' heat goes to ``storage`` in the background. Safe to share
    between threads."""

    def __init__(
        self,
        settings: RecallSettings,
        storage: MemoryStorage,
        counter: TokenCounter,
        *,
        embedder: Embedder | None = None,
        vectors: FactVectors | None = None,
    ) -> None:
        self.settings = settings
        self.embedder = embedder
        self.vectors = vectors if embedder is not None else None
        self.fusion = "rrf"
        self.terms = (
            MemoryTerms(OKAPI if dialect_of(self.vectors.engine).raw_fts else FTS5)
            if self.vectors is not None
            else None
        )
        """With vectors, the memory's text matches come from an in-process index
        (:mod:`memory_sql.storage.memory_terms`): a hybrid context asks for them twice."""
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
        text = query_text(query)
        terms = query_terms(text)
        if not doc.facts or not (terms or (self.vectors is not None and text.strip())):
            return []
        limit = self.weights.candidates
        matches = self._match(doc, scope, terms, limit) if terms else []
        weight = self.weights.expansion
        if matches and weight > 0:
            extra = expansion_terms(matches, lines, terms, self.weights.expansion_facts)
            if extra:
                found = self._match(doc, scope, extra, limit)
                matches = merge_matches(matches, found, weight)
        semantic = self.semantic_matches(doc, scope, text)
        if semantic:
            matches = fuse(
                matches, semantic, weight=self.settings.semantic_weight, method=self.fusion
            )
            matches = self._expanded(doc, scope, terms, matches, lines)
        return rank_facts(lines.facts_by_id, matches, self.weights, terms=lines.terms)

    def _match(
        self, doc: MemoryDocument, scope: Scope, terms: list[str], limit: int
    ) -> list[tuple[str, float]]:
        """The text matches of ``terms`` in ``doc``: from the in-process index when the memory
        has a version to check it by, else from the database's index."""
        if self.terms is not None and doc.version is not None:
            return self.terms.match_memory(doc, scope, terms, limit=limit)
        return self.storage.match_facts(doc, scope, terms, limit=limit)

    def _expanded(
        self,
        doc: MemoryDocument,
        scope: Scope,
        terms: list[str],
        fused: list[tuple[str, float]],
        lines: FactLines,
    ) -> list[tuple[str, float]]:
        """``fused`` with a second text lookup added (``semantic_expansion_weight``), by the
        terms of the best ``semantic_expansion_facts`` fused facts that the query lacks. A fact
        found by meaning ("the notification service" → "Zephyr sends the notifications") lends
        its names to find the facts about them that share no word with the question
        ("Zephyr is written in Go")."""
        weight = self.settings.semantic_expansion_weight
        if weight <= 0 or not fused:
            return fused
        extra = expansion_terms(fused, lines, terms, self.settings.semantic_expansion_facts)
        if not extra:
            return fused
        found = self._match(doc, scope, extra, self.weights.candidates)
        return fuse_more(fused, found, weight=weight, method=self.fusion)

    def semantic_matches(
        self, doc: MemoryDocument, scope: Scope, text: str
    ) -> list[tuple[str, float]]:
        """The candidates of ``doc``'s facts most similar in meaning to ``text``, with their
        cosines, best first; empty without embeddings, vectors (or when they cannot be read),
        or a query vector in time."""
        if self.vectors is None or self.embedder is None or self.settings.semantic_weight <= 0:
            return []
        if not text.strip():
            return []
        try:
            ids, rows = self.vectors.matrix(scope, doc.facts, doc.version)
        except StorageError as exc:  # the text ranking does without them
            logger.warning("memory %s: vectors unreadable, ranked by text: %s", scope, exc)
            self.embedder.stats.add(queries=1, query_failures=1)
            return []
        if not ids:
            return []
        vector = self.embedder.embed_query(text)
        if vector is None:
            return []
        return vector_matches(ids, rows, vector, limit=self.weights.candidates)

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
