"""Facts found and scored by the database's full-text index (revision 0011).

Two questions are asked of the index, with terms cut by :func:`memory_sql.text_search.query_terms`,
and one matching rule for both: a query term matches a fact's term that it equals or starts
(``pyth`` matches "Python", ``caf``, the stem of "cafe", matches "Café Luzeiro"'s ``caf``).

- :func:`match_facts`: which facts of one memory match any term of a query, each with its BM25
  score (``k1`` = 1.2, ``b`` = 0.75), highest first. This is the text relevance of ranked recall.
- :func:`search_condition`: a condition on ``memory_facts`` for a search across memories, true
  for a fact matching every term, and a relevance to order by, in which, as in BM25, a rare
  term weighs more than a common one.

PostgreSQL finds the memory's matching facts through the GIN index of the generated
``tsvector`` (prefix queries, ``'caf':*``) and returns their searchable text, from which
:func:`bm25` scores them: document frequencies and the fact count are the memory's own, the
average length that of the matching facts. SQLite asks FTS5 (prefix phrases, ``"caf" *``),
whose ``bm25()`` weighs terms by their frequency in the whole table, restricted to the memory
by its scope term.
The JSON-file store, which has no index, scores the same BM25 in Python over the loaded memory
(:func:`score_in_memory`).

Terms are runs of letters and digits, so no text reaches the index as query syntax; they are
quoted all the same.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..models import Fact
from ..schema import memory_facts
from ..scope import Scope
from ..text_search import search_text
from .dialects import SQLDialect, dialect_of
from .dialects import pg_scope_term as pg_scope_term
from .dialects import scope_term as scope_term
from .dialects import text_search_config as text_search_config
from .driver import DriverConnection, DriverFallback, unobserved

K1 = 1.2
B = 0.75

MAX_MATCHING = 20_000
"""At most this many matching facts are scored for one query (a query of very common words)."""


def match_facts(
    engine: Engine, scope: Scope, terms: Sequence[str], *, facts: int, limit: int
) -> list[tuple[str, float]]:
    """The ids of up to ``limit`` facts of ``scope`` that hold any of ``terms``, with their
    BM25 scores, highest first. ``facts`` is how many facts the memory holds (BM25's ``N``).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed (the caller wraps it).
    """
    if not terms:
        return []
    dialect = dialect_of(engine)
    params = dialect.fts_match_params(engine, scope, list(terms), limit=limit, most=MAX_MATCHING)
    rows = _rows(engine, dialect, params)
    if dialect.raw_fts:
        key = (scope.tenant_id, scope.user_id, scope.agent_key)
        mine = [(row[0], row[1]) for row in rows if tuple(row[2:]) == key]
        return bm25(mine, terms, limit=limit, facts=facts)
    return [(row[0], float(row[1])) for row in rows]


def _rows(engine: Engine, dialect: SQLDialect, params: dict[str, Any]) -> list[Any]:
    sql = dialect.fts_match_sql
    if unobserved(engine):
        try:
            with DriverConnection(engine) as dbapi:
                found: list[Any] = dbapi.execute(sql, params).fetchall()
                return found
        except DriverFallback:
            pass
    with engine.connect() as conn:
        return list(conn.execute(sa.text(dialect.driver_sql(sql)), params))


def bm25(
    documents: Sequence[tuple[str, str]],
    terms: Sequence[str],
    *,
    limit: int,
    facts: int | None = None,
) -> list[tuple[str, float]]:
    """BM25 of ``documents`` (fact id, searchable text) for ``terms``, best first, at most
    ``limit``, a term matching the words it starts (the module's rule). Document frequencies
    are counted over ``documents``, which must hold every fact of the memory that holds a term;
    ``facts`` is the memory's size (default: the documents'), the average length that of
    ``documents``."""
    wanted = set(terms)
    if not wanted or not documents:
        return []
    parsed = [(fact_id, *_term_counts(text)) for fact_id, text in documents]
    total = sum(length for *_, length in parsed)
    vocabulary = set().union(*(counts.keys() for _, counts, _ in parsed))
    prefixed = _prefixed_by(vocabulary, wanted)
    words = prefixed.keys()
    held = []
    for fact_id, counts, length in parsed:
        common = counts.keys() & words
        if common:
            tf: dict[str, int] = {}
            for word in common:
                for term in prefixed[word]:
                    tf[term] = tf.get(term, 0) + counts[word]
            held.append((fact_id, tf, length))
    average = max(total / len(documents), 1.0)
    frequency = Counter(itertools.chain.from_iterable(tf for _, tf, _ in held))
    n = max(facts or 0, len(documents))
    idf = {
        term: math.log(1 + (n - count + 0.5) / (count + 0.5)) for term, count in frequency.items()
    }
    scored = []
    for fact_id, tf, length in held:
        norm = K1 * (1 - B + B * length / average)
        score = 0.0
        for term, count in tf.items():
            score += idf[term] * count * (K1 + 1) / (count + norm)
        scored.append((-score, fact_id))
    return [(fact_id, -negative) for negative, fact_id in heapq.nsmallest(limit, scored)]


def _prefixed_by(vocabulary: set[str], terms: set[str]) -> dict[str, tuple[str, ...]]:
    """The words of ``vocabulary`` that some of ``terms`` start, each with those terms."""
    sizes = sorted({len(term) for term in terms})
    found = {}
    for word in vocabulary:
        hits = tuple(word[:size] for size in sizes if size <= len(word) and word[:size] in terms)
        if hits:
            found[word] = hits
    return found


@functools.lru_cache(maxsize=100_000)
def _term_counts(text: str) -> tuple[dict[str, int], int]:
    words = text.split()
    return dict(Counter(words)), len(words)


def search_condition(
    engine: Engine, terms: Sequence[str]
) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
    """A condition true for facts holding every term (each also as a prefix), and a relevance
    (higher is better) for them, for a search over ``memory_facts`` across memories."""
    return dialect_of(engine).search_condition(engine, list(terms))


def score_in_memory(
    facts: Sequence[Fact], terms: Sequence[str], *, limit: int
) -> list[tuple[str, float]]:
    """:func:`match_facts` for a memory without an index: BM25 computed here over ``facts``."""
    return bm25([(fact.id, search_text(fact.content)) for fact in facts], terms, limit=limit)


def rebuild_sqlite_index(engine: Engine) -> int:
    """Refill SQLite's ``memory_facts_fts`` from ``memory_facts`` (after a ``VACUUM`` or a
    rebuild of the table, which may renumber rowids), closed facts under their closed scope
    term as revision 0015's triggers write them; returns the rows indexed."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO memory_facts_fts (memory_facts_fts) VALUES ('delete-all')"
        )
        conn.exec_driver_sql(
            "INSERT INTO memory_facts_fts (rowid, search_text, scope_key) SELECT rowid, "
            "search_text, CASE WHEN valid_to IS NULL THEN 's' ELSE 'c' END || "
            "hex(tenant_id || char(31) || user_id || char(31) || agent_name) FROM memory_facts"
        )
        return conn.execute(sa.select(sa.func.count()).select_from(memory_facts)).scalar_one()
