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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..intake.messages import normalize_messages
from ..models import Fact
from ..text_search import STOPWORDS, search_text
from .injection import FactLines

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
    expansion: float = 0.0
    """The weight of the second lookup, by the best matches' own terms (0: none)."""
    expansion_facts: int = 1
    """How many of the best matches give their terms to the second lookup."""


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
    facts: Sequence[Fact] | Mapping[str, Fact],
    matches: Sequence[tuple[str, float]],
    weights: RankingWeights = RankingWeights(),
    *,
    now: datetime | None = None,
    terms: dict[str, frozenset[str]] | None = None,
) -> list[str]:
    """The ids of the matched facts (``matches``: fact id and BM25 score), best first.
    ``facts`` may be given by id; ``terms`` keeps facts' search terms between calls."""
    if not matches:
        return []
    now = now or datetime.now(timezone.utc)
    by_id = facts if isinstance(facts, Mapping) else {fact.id: fact for fact in facts}
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
    known = terms if terms is not None else {}
    return _spread([fact for _, fact in scored], weights.duplicate_overlap, known)


SPREAD_WINDOW = 12
"""A fact is compared with this many of the facts kept just before it: near-duplicates score
alike, so they come close together."""
SPREAD_DEPTH = 60
"""Only the best this many matches are spread (more rarely fit a block); the rest follow."""


def _spread(ranked: list[Fact], overlap: float, known: dict[str, frozenset[str]]) -> list[str]:
    """``ranked`` with each near-duplicate of an earlier fact moved behind the others."""
    kept: list[str] = []
    recent: list[tuple[frozenset[str], int]] = []
    later: list[str] = []
    for fact in ranked[:SPREAD_DEPTH]:
        terms = known.get(fact.id)
        if terms is None:
            terms = known[fact.id] = frozenset(search_text(fact.content).split())
        size = len(terms)
        # |a ∩ b| ≥ overlap · |a ∪ b| needs the smaller set to be ≥ overlap · the larger
        low, high = overlap * size, size / overlap
        duplicate = False
        for other, other_size in recent:
            if low <= other_size <= high:
                shared = len(terms & other)
                if shared >= overlap * (size + other_size - shared):
                    duplicate = True
                    break
        if duplicate and size:
            later.append(fact.id)
            continue
        kept.append(fact.id)
        recent.append((terms, size))
        if len(recent) > SPREAD_WINDOW:
            del recent[0]
    return kept + later + [fact.id for fact in ranked[SPREAD_DEPTH:]]


EXPANSION_TERMS = 8
"""At most this many terms of the best matches go into the second lookup."""


def expansion_terms(
    matches: Sequence[tuple[str, float]],
    lines: FactLines,
    query: Sequence[str],
    facts: int,
) -> list[str]:
    """Terms of the ``facts`` best matches that the query did not have, longest first (names
    and rare words rather than short common ones), for a second lookup: a question about "the
    notification service" finds "Zephyr is the notification service", and through "zephyr"
    the facts about Zephyr that share no word with the question."""
    have = set(query)
    found: dict[str, None] = {}
    for fact_id, _ in matches[:facts]:
        fact = lines.facts_by_id.get(fact_id)
        if fact is None:
            continue
        terms = lines.terms.get(fact_id)
        if terms is None:
            terms = lines.terms[fact_id] = frozenset(search_text(fact.content).split())
        for term in terms:
            if term not in have and term not in STOPWORDS and (len(term) > 2 or not term.isascii()):
                found[term] = None
    return sorted(found, key=lambda term: (-len(term), term))[:EXPANSION_TERMS]


def merge_matches(
    first: Sequence[tuple[str, float]], second: Sequence[tuple[str, float]], weight: float
) -> list[tuple[str, float]]:
    """The text scores of both lookups: the first's, plus ``weight`` times the second's
    (scaled to the first's best), best first."""
    if not second:
        return list(first)
    scale = weight * (first[0][1] if first else 1.0) / (second[0][1] or 1.0)
    scores = dict(first)
    for fact_id, score in second:
        scores[fact_id] = scores.get(fact_id, 0.0) + scale * score
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


RRF_K = 60
"""The rank offset of reciprocal-rank fusion (the usual 60: the first places do not dominate)."""
SEMANTIC_CANDIDATES_FLOOR = 0.0
"""Facts whose cosine with the query is at most this are no vector candidates."""


def vector_matches(
    ids: Sequence[str], rows: Any, query: Any, *, limit: int
) -> list[tuple[str, float]]:
    """The ``limit`` facts (``ids``, their unit vectors ``rows``) most similar to the unit
    vector ``query``, with their cosines, best first: exact, a matrix product in numpy."""
    import numpy as np

    if not ids or len(query) != rows.shape[1]:
        return []
    cosines = rows @ query
    count = min(limit, len(ids))
    top = np.argpartition(-cosines, count - 1)[:count] if count < len(ids) else np.arange(len(ids))
    top = top[np.argsort(-cosines[top], kind="stable")]
    return [(ids[i], float(cosines[i])) for i in top if cosines[i] > SEMANTIC_CANDIDATES_FLOOR]


def fuse(
    lexical: Sequence[tuple[str, float]],
    semantic: Sequence[tuple[str, float]],
    *,
    weight: float = 1.0,
    method: str = "rrf",
) -> list[tuple[str, float]]:
    """One list of candidates from the text index's (BM25) and the vectors' (cosine), best
    first, with a score for :func:`rank_facts`.

    ``rrf`` (the default, reciprocal-rank fusion): each list gives a fact 1 / (:data:`RRF_K` +
    its rank), the vector list times ``weight``; ranks alone count, so BM25's unbounded
    scores and cosines' narrow band need no calibration. ``weighted``: BM25 over the best BM25
    plus ``weight`` times the cosine rescaled to [0, 1] over the candidates (measured against
    RRF in ``benchmarks/bench_recall.py``; docs/semantic-recall.md).
    """
    if not semantic or weight <= 0:
        return list(lexical)
    scores: dict[str, float] = {}
    if method == "rrf":
        for rank, (fact_id, _) in enumerate(lexical, 1):
            scores[fact_id] = 1.0 / (RRF_K + rank)
        for rank, (fact_id, _) in enumerate(semantic, 1):
            scores[fact_id] = scores.get(fact_id, 0.0) + weight / (RRF_K + rank)
    elif method == "weighted":
        best = lexical[0][1] if lexical else 1.0
        for fact_id, score in lexical:
            scores[fact_id] = score / (best or 1.0)
        high = semantic[0][1]
        low = semantic[-1][1]
        spread = (high - low) or 1.0
        for fact_id, cosine in semantic:
            scores[fact_id] = scores.get(fact_id, 0.0) + weight * (cosine - low) / spread
    else:
        raise ValueError(f"fusion method {method!r} is not rrf or weighted")
    cosines = dict(semantic)  # a tie (first in one list, second in the other) goes by meaning
    return sorted(scores.items(), key=lambda item: (-item[1], -cosines.get(item[0], -1.0), item[0]))


def fuse_more(
    fused: Sequence[tuple[str, float]],
    more: Sequence[tuple[str, float]],
    *,
    weight: float,
    method: str = "rrf",
) -> list[tuple[str, float]]:
    """``fused`` (:func:`fuse`'s list) with one more text ranking ``more`` added at ``weight``:
    by reciprocal rank (``rrf``), or its score over its best times ``weight`` (``weighted``).
    The order of ``fused`` breaks ties."""
    if not more or weight <= 0:
        return list(fused)
    scores = dict(fused)
    if method == "rrf":
        for rank, (fact_id, _) in enumerate(more, 1):
            scores[fact_id] = scores.get(fact_id, 0.0) + weight / (RRF_K + rank)
    else:
        best = more[0][1] or 1.0
        for fact_id, score in more:
            scores[fact_id] = scores.get(fact_id, 0.0) + weight * score / best
    place = {fact_id: rank for rank, (fact_id, _) in enumerate(fused)}
    return sorted(
        scores.items(), key=lambda item: (-item[1], place.get(item[0], len(place)), item[0])
    )
