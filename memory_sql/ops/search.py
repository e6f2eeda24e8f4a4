"""Facts found across memories by their text (and filters).

The queries live in :mod:`memory_sql.storage.fact_search` (SQL stays in ``storage/``); the
facts found are shown with any secret stored before redaction existed replaced
(:mod:`memory_sql.intake.redact`). With a service's :class:`~memory_sql.recall.context.Recall` and
embeddings, a search of one memory is hybrid (docs/semantic-recall.md).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from ..intake.redact import DEFAULT
from ..models import Fact, copy_model
from ..recall.context import Recall
from ..recall.ranking import fuse
from ..scope import Scope
from ..storage.base import MemoryStorage
from ..storage.capabilities import engine_for
from ..storage.fact_search import FactRecord as FactRecord
from ..storage.fact_search import _search_statement as _search_statement
from ..storage.fact_search import search_facts as search_by_text


def search_facts(
    storage: MemoryStorage | Engine,
    text: str | None = None,
    *,
    category: str | None = None,
    min_confidence: float | None = None,
    tenant_id: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    limit: int | None = 50,
    include_closed: bool = False,
    recall: Recall | None = None,
) -> list[FactRecord]:
    """:func:`memory_sql.storage.fact_search.search_facts` on ``storage`` (its filters, errors
    and text matching), and with ``recall`` (a service's, with embeddings:
    docs/semantic-recall.md) and a ``text`` searching one memory (tenant, user and agent given,
    live facts), hybrid as a context's ranking is: the facts holding the terms and those whose
    cosine with the text is at least :data:`SEARCH_MIN_COSINE`, fused by reciprocal rank;
    without vectors, or when the text's embedding fails or is late, the lexical search
    alone."""
    one_memory = None not in (tenant_id, user_id, agent_name) and not include_closed
    hybrid = recall is not None and recall.vectors is not None and one_memory
    hybrid = hybrid and bool(text and text.strip())
    # A hybrid search fuses every text match of the memory (at most max_facts): one query.
    lexical = search_by_text(
        engine_for(storage, needed_by="searching facts"),
        text,
        category=category,
        min_confidence=min_confidence,
        tenant_id=tenant_id,
        user_id=user_id,
        agent_name=agent_name,
        limit=None if hybrid else limit,
        include_closed=include_closed,
    )
    if not hybrid or recall is None or text is None:
        return _shown(lexical)
    scope = Scope.of(user_id=user_id, agent_name=agent_name or None, tenant_id=tenant_id)
    found = _search_by_meaning(recall, scope, text, category, min_confidence, limit)
    if found is None:
        return _shown(lexical if limit is None else lexical[:limit])
    return _shown(_fused(lexical, found, scope, recall, limit))


def _shown(records: list[FactRecord]) -> list[FactRecord]:
    """``records`` with any secret stored before redaction existed replaced."""
    shown = []
    for record in records:
        content = DEFAULT(record.fact.content)
        if content != record.fact.content:
            fact = copy_model(record.fact, content=content)
            record = FactRecord(record.tenant_id, record.user_id, record.agent_name, fact)
        shown.append(record)
    return shown


SEARCH_MIN_COSINE = 0.3
"""A fact is found by meaning when its cosine with the search text is at least this (for
all-MiniLM-L6-v2, unrelated sentences score about 0.1, paraphrases 0.5 and more)."""


def _search_by_meaning(
    recall: Recall,
    scope: Scope,
    text: str,
    category: str | None,
    min_confidence: float | None,
    limit: int | None,
) -> list[tuple[Fact, float]] | None:
    """The memory's facts close in meaning to ``text`` passing the filters, with their
    cosines, best first; None when there is no vector to rank by (the search is lexical)."""
    doc = recall.storage.load(**scope.arguments())
    matches = recall.semantic_matches(doc, scope, text)
    if not matches:
        return None
    by_id = {fact.id: fact for fact in doc.facts}
    found = []
    for fact_id, cosine in matches:
        fact = by_id[fact_id]
        if cosine < SEARCH_MIN_COSINE:
            break
        if category is not None and fact.category != category.strip().lower():
            continue
        if min_confidence is not None and fact.confidence < min_confidence:
            continue
        found.append((fact, cosine))
    return found


def _fused(
    lexical: list[FactRecord],
    semantic: list[tuple[Fact, float]],
    scope: Scope,
    recall: Recall,
    limit: int | None,
) -> list[FactRecord]:
    facts = {record.fact.id: record.fact for record in lexical}
    facts.update((fact.id, fact) for fact, _ in semantic)
    order = fuse(
        [(record.fact.id, 0.0) for record in lexical],
        [(fact.id, cosine) for fact, cosine in semantic],
        weight=recall.settings.semantic_weight,
    )
    agent = scope.agent_name
    records = [FactRecord(scope.tenant_id, scope.user_id, agent, facts[i]) for i, _ in order]
    return records if limit is None else records[:limit]
