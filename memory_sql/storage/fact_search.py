"""Facts of many memories found by scope, category, confidence and text."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..models import (
    CATEGORY_PATTERN,
    Fact,
    format_timestamp,
    trusted_fact,
)
from ..schema import (
    FACT_COLUMNS,
    LIVE,
    memory_facts,
)
from ..scope import Scope
from ..text_search import query_terms
from .driver import read_facts_by_driver
from .search import search_condition


@dataclass(frozen=True)
class FactRecord:
    """A fact with the memory it belongs to (``agent_name`` None: the unnamed agents')."""

    tenant_id: str
    user_id: str
    agent_name: str | None
    fact: Fact

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the scope, then the fact's fields (timestamps as DeerFlow writes them)."""
        fact = self.fact
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "agent_name": self.agent_name,
            "id": fact.id,
            "content": fact.content,
            "category": fact.category,
            "confidence": fact.confidence,
            "source_thread_id": fact.source_thread_id,
            "source_error": fact.source_error,
            "created_at": format_timestamp(fact.created_at),
            "updated_at": format_timestamp(fact.updated_at),
            "expected_valid_days": fact.expected_valid_days,
            "confirmed_at": format_timestamp(fact.confirmed_at) or None,
            "confirmation_count": fact.confirmation_count,
            "valid_from": format_timestamp(fact.since),
            "valid_to": format_timestamp(fact.valid_to) or None,
            "superseded_by": fact.superseded_by,
        }


_ORDER = (
    memory_facts.c.confidence.desc(),
    memory_facts.c.tenant_id,
    memory_facts.c.user_id,
    memory_facts.c.agent_name,
    memory_facts.c.created_at,
    memory_facts.c.fact_id,
)
_SEARCH = sa.select(
    memory_facts.c.tenant_id,
    memory_facts.c.user_id,
    memory_facts.c.agent_name,
    *FACT_COLUMNS,
    memory_facts.c.valid_to,
    memory_facts.c.superseded_by,
).order_by(*_ORDER)


def search_facts(
    engine: Engine,
    text: str | None = None,
    *,
    category: str | None = None,
    min_confidence: float | None = None,
    tenant_id: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    limit: int | None = 50,
    include_closed: bool = False,
) -> list[FactRecord]:
    """Facts of every memory matching all the filters given: most relevant to ``text`` first
    when one is given, else highest confidence first.

    ``text`` is looked up in the database's full-text index (:mod:`memory_sql.text_search`,
    the matching rule of :mod:`memory_sql.storage.search`, the same as a ranked context's): a
    fact matches when it holds every term of ``text``, each also as the start of a longer
    word, folded as duplicates are (NFKC, ``str.casefold()``) and accents dropped:
    ``"STRASSE"`` finds ``"Straße"``, ``"python"`` and ``"pyth"`` find ``"ＰＹＴＨＯＮ"``,
    ``"cafe"`` finds ``"Café"``, ``"上海"`` finds ``"在上海工作"`` (each CJK character is a
    term). A rare term weighs more than a common one; ties in relevance go by confidence. A text
    with no letters or digits matches nothing (an empty one is no filter). ``agent_name=""``
    selects the unnamed agents' memories; ``limit=None`` returns every match. Only live facts
    are searched unless ``include_closed`` (closed versions then come with their
    ``valid_to`` and ``superseded_by``).

    Raises:
        InvalidScopeError: a tenant, user or agent filter is malformed.
        ValueError: ``min_confidence`` outside [0, 1], ``limit`` below 1, a bad category.
        StorageError: the database failed.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
        raise ValueError(f"min_confidence must be between 0 and 1, not {min_confidence}")
    checked = Scope.of(user_id=user_id, agent_name=agent_name or None, tenant_id=tenant_id)
    parameters: dict[str, Any] = {}
    if tenant_id is not None:
        parameters["tenant"] = checked.tenant_id
    if user_id is not None:
        parameters["user"] = checked.user_id
    if agent_name is not None:
        parameters["agent"] = checked.agent_key
    if category is not None:
        category = category.strip().lower()
        if not CATEGORY_PATTERN.fullmatch(category):
            raise ValueError(f"category {category!r} must match ^[a-z0-9_-]{{1,32}}$")
        parameters["category"] = category
    if min_confidence is not None:
        parameters["min_confidence"] = min_confidence
    if limit is not None:
        parameters["limit"] = limit
    statement = _search_statement(frozenset(parameters) | _LIVE_ONLY[include_closed])
    terms = query_terms(text) if text is not None and text.strip() else None
    if terms == []:
        return []
    with database_errors(engine, "search facts"):
        if terms:
            matching, relevance = search_condition(engine, terms)
            order = (relevance.desc(), *_ORDER)
            statement = statement.where(matching).order_by(None).order_by(*order)
        rows = read_facts_by_driver(engine, statement, parameters, scoped=3)
        if rows is not None:  # one autocommit round trip on the driver
            return [FactRecord(t, u, a or None, fact) for (t, u, a), fact in rows]
        with engine.connect() as conn:
            autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
            return [_record(row) for row in autocommit.execute(statement, parameters).all()]


@functools.lru_cache(maxsize=64)
def _search_statement(filters: frozenset[str]) -> sa.Select[Any]:
    """:data:`_SEARCH` with the ``filters`` given (names of their bound parameters), built
    once per combination: SQLAlchemy's construction and cache key are not redone per call,
    and the driver's text of it is compiled once."""
    statement = _SEARCH
    for name, condition in _SEARCH_FILTERS.items():
        if name in filters:
            statement = statement.where(condition)
    if "limit" in filters:
        statement = statement.limit(sa.bindparam("limit", type_=sa.Integer))
    return statement


_LIVE_ONLY = {False: frozenset({"live"}), True: frozenset()}
_SEARCH_FILTERS = {
    "live": LIVE,
    "tenant": memory_facts.c.tenant_id == sa.bindparam("tenant"),
    "user": memory_facts.c.user_id == sa.bindparam("user"),
    "agent": memory_facts.c.agent_name == sa.bindparam("agent"),
    "category": memory_facts.c.category == sa.bindparam("category"),
    "min_confidence": memory_facts.c.confidence >= sa.bindparam("min_confidence"),
}


def _record(row: Any) -> FactRecord:
    tenant_id, user_id, agent_name, *fact = row
    return FactRecord(tenant_id, user_id, agent_name or None, trusted_fact(*fact))
