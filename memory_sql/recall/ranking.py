"""The order in which a query's facts are offered to the prompt's budget.

The database's full-text index finds the facts of a memory that share terms with the query and
scores them with BM25 (:func:`memory_sql.storage.search.match_facts`). Each such fact then gets

    score = relevance · (bm25 / best bm25)
          + confidence · fact.confidence
          + recency · 2 ** (−age in days / recency_half_life_days)

(the age from the fact's last change), and the facts are taken best first, except that a fact
whose terms overlap an already taken one's by at least ``duplicate_overlap`` (Jaccard) is moved
behind the others, so near-duplicates do not crowd the block. The weights are
:class:`RankingWeights` (config ``recall_*``). Facts the query did not match come after, by
confidence (:func:`~memory_sql.recall.injection.format_memory_for_injection` adds them), and
facts of the guaranteed categories still go first whatever the query.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..intake.messages import normalize_messages
from ..models import Fact
from ..text_search import search_text

QUERY_TURNS = 2
"""How many of the last user turns of a conversation make its query."""


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """The weights of the recall score (see the module docstring)."""

    relevance: float = 1.0
    confidence: float = 0.2
    recency: float = 0.1
    recency_half_life_days: float = 180.0
    duplicate_overlap: float = 0.7
    candidates: int = 100
    """How many of the best text matches the database returns to be scored."""


def query_text(query: str | Iterable[Any]) -> str:
    """The text a query stands for: a string as it is; of a conversation (messages of any
    shape :mod:`memory_sql.intake.messages` reads), its last :data:`QUERY_TURNS` user turns.

    Raises:
        InvalidMessageError: a message is malformed.
    """
    if isinstance(query, str):
        return query
    users = [m.text for m in normalize_messages(query) if m.role == "user" and not m.hidden]
    return "\n".join(users[-QUERY_TURNS:])


def rank_facts(
    facts: Sequence[Fact],
    matches: Sequence[tuple[str, float]],
    weights: RankingWeights = RankingWeights(),
    *,
    now: datetime | None = None,
) -> list[str]:
    """The ids of the matched facts (``matches``: fact id and BM25 score), best first."""
    if not matches:
        return []
    now = now or datetime.now(timezone.utc)
    by_id = {fact.id: fact for fact in facts}
    best = max(score for _, score in matches) or 1.0
    scored = []
    for fact_id, bm25 in matches:
        fact = by_id.get(fact_id)
        if fact is None:  # saved since the memory was loaded
            continue
        changed = fact.updated_at or fact.created_at or now
        age_days = max((now - changed).total_seconds(), 0.0) / 86_400
        score = (
            weights.relevance * bm25 / best
            + weights.confidence * fact.confidence
            + weights.recency * 2.0 ** (-age_days / weights.recency_half_life_days)
        )
        scored.append((score, fact))
    scored.sort(key=lambda item: -item[0])
    return _spread([fact for _, fact in scored], weights.duplicate_overlap)


def _spread(ranked: list[Fact], overlap: float) -> list[str]:
    """``ranked`` with each near-duplicate of an earlier fact moved behind the others."""
    kept: list[tuple[str, frozenset[str]]] = []
    later: list[str] = []
    for fact in ranked:
        terms = frozenset(search_text(fact.content).split())
        if terms and any(len(terms & other) >= overlap * len(terms | other) for _, other in kept):
            later.append(fact.id)
        else:
            kept.append((fact.id, terms))
    return [fact_id for fact_id, _ in kept] + later
