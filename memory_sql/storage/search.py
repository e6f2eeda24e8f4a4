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
import hashlib
import heapq
import itertools
import math
import re
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..models import Fact
from ..schema import memory_facts
from ..scope import Scope
from ..text_search import search_text
from .driver import DriverConnection, DriverFallback, unobserved

K1 = 1.2
B = 0.75

# The memory's live facts holding any of the terms, found through the GIN index (partial: live
# rows only, revision 0015), with their searchable text: BM25 is computed from it below.
_PG_MATCHING = """
SELECT fact_id, search_text, tenant_id, user_id, agent_name FROM memory_facts
WHERE valid_to IS NULL AND search_vector @@ (
    CAST(%(memory)s AS tsquery) && to_tsquery(CAST(%(config)s AS regconfig), %(query)s)
)
LIMIT %(most)s"""

MAX_MATCHING = 20_000
"""At most this many matching facts are scored for one query (a query of very common words)."""

# The best rows first, by the index alone (its scope term keeps it to the memory's live facts:
# a closed fact's term differs, revision 0015); then their facts, the scope checked again.
_SQLITE_MATCH = """
SELECT f.fact_id, -h.score
FROM (SELECT rowid, bm25(memory_facts_fts, 1.0, 0.0) AS score
      FROM memory_facts_fts WHERE memory_facts_fts MATCH :match
      ORDER BY score LIMIT :limit) AS h
JOIN memory_facts AS f ON f.rowid = h.rowid
WHERE f.tenant_id = :tenant AND f.user_id = :user AND f.agent_name = :agent
ORDER BY h.score, f.fact_id"""


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
    if engine.dialect.name == "postgresql":
        sql = _PG_MATCHING
        params = {
            "memory": _quoted_lexeme(pg_scope_term(scope)),
            "config": text_search_config(engine),
            "query": " | ".join(_quoted_lexeme(term) + ":*" for term in terms),
            "most": MAX_MATCHING,
        }
    else:
        sql = _SQLITE_MATCH
        alternatives = " OR ".join(_quoted_phrase(term) + " *" for term in terms)
        own = _quoted_phrase(scope_term(scope))
        params = {
            "tenant": scope.tenant_id,
            "user": scope.user_id,
            "agent": scope.agent_key,
            "match": f"scope_key : {own} AND search_text : ({alternatives})",
            "limit": limit,
        }
    rows = _rows(engine, sql, params)
    if engine.dialect.name == "postgresql":
        key = (scope.tenant_id, scope.user_id, scope.agent_key)
        own = [(row[0], row[1]) for row in rows if tuple(row[2:]) == key]
        return bm25(own, terms, limit=limit, facts=facts)
    return [(row[0], float(row[1])) for row in rows]


def _rows(engine: Engine, sql: str, params: dict[str, Any]) -> list[Any]:
    if unobserved(engine):
        try:
            with DriverConnection(engine) as dbapi:
                return dbapi.execute(sql, params).fetchall()
        except DriverFallback:
            pass
    statement = sa.text(_named(sql) if engine.dialect.name == "postgresql" else sql)
    with engine.connect() as conn:
        return list(conn.execute(statement, params))


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
) -> tuple[sa.ColumnElement, sa.ColumnElement]:
    """A condition true for facts matching every term, and a relevance (higher is better) for
    them, for a search over ``memory_facts`` across memories."""
    if engine.dialect.name == "postgresql":
        config = sa.cast(text_search_config(engine), _REGCONFIG)
        vector = sa.literal_column("memory_facts.search_vector", _TSVECTOR)
        text = " & ".join(_quoted_lexeme(term) + ":*" for term in terms)
        query = sa.func.to_tsquery(config, text, type_=_TSQUERY)
        size = _pg_estimated_size()
        relevance = sum(
            (
                _pg_idf(config, term, size) * sa.func.ts_rank(vector, _pg_prefix(config, term), 1)
                for term in dict.fromkeys(terms)
            ),
            sa.literal(0.0),
        )
        return vector.op("@@")(query), relevance
    match = "search_text : (" + " AND ".join(_quoted_phrase(term) + " *" for term in terms) + ")"
    fts = sa.text(
        "SELECT rowid, bm25(memory_facts_fts, 1.0, 0.0) AS rank FROM memory_facts_fts "
        "WHERE memory_facts_fts MATCH :search_match"
    ).bindparams(search_match=match)
    hits = fts.columns(sa.column("rowid", sa.Integer), sa.column("rank", sa.Float)).subquery()
    rowid = sa.literal_column("memory_facts.rowid")
    relevance = sa.select(-hits.c.rank).where(hits.c.rowid == rowid).scalar_subquery()
    return rowid.in_(sa.select(hits.c.rowid)), relevance


FREQUENCY_CAP = 2_000
"""Live facts counted at most per term for its document frequency on PostgreSQL: terms more
common than that all weigh as one that common (the count stays a bounded index read)."""


def _pg_prefix(config: sa.ColumnElement, term: str) -> sa.ColumnElement:
    return sa.func.to_tsquery(config, _quoted_lexeme(term) + ":*", type_=_TSQUERY)


def _pg_estimated_size() -> sa.ColumnElement:
    """The table's size as the planner last estimated it (-1 before its first analysis)."""
    pg_class = sa.table("pg_class", sa.column("oid"), sa.column("reltuples", sa.Float))
    own = pg_class.c.oid == sa.text("'memory_facts'::regclass")
    return sa.select(pg_class.c.reltuples).where(own).scalar_subquery()


def _pg_idf(config: sa.ColumnElement, term: str, size: sa.ColumnElement) -> sa.ColumnElement:
    """``term``'s inverse document frequency as BM25 weighs it, ``ln(1 + (N − n + 0.5) / (n +
    0.5))`` = ``ln((N + 1) / (n + 0.5))``: ``n`` the live facts it matches as a prefix, counted
    through the GIN index up to :data:`FREQUENCY_CAP`, ``N`` the table's estimated size (at
    least the cap, so at least ``n``). An uncorrelated subquery: PostgreSQL computes it once per
    search, in the search's own statement."""
    facts = memory_facts.alias("frequency")
    vector = sa.literal_column("frequency.search_vector", _TSVECTOR)
    matching = (
        sa.select(sa.literal(1))
        .select_from(facts)
        .where(facts.c.valid_to.is_(None), vector.op("@@")(_pg_prefix(config, term)))
        .limit(FREQUENCY_CAP)
        .subquery()
    )
    count = sa.select(sa.func.count()).select_from(matching).scalar_subquery()
    total = sa.func.greatest(size, FREQUENCY_CAP)
    return sa.func.ln((total + 1.0) / (count + 0.5))


def pg_scope_term(scope: Scope) -> str:
    """The term of PostgreSQL's ``search_vector`` for ``scope``'s memory, as revision 0011's
    generated column makes it (``'s' || md5(tenant || chr(31) || user || chr(31) || agent)``;
    the rows read are checked against the scope all the same)."""
    key = "\x1f".join((scope.tenant_id, scope.user_id, scope.agent_key))
    return "s" + hashlib.md5(key.encode("utf-8"), usedforsecurity=False).hexdigest()


def scope_term(scope: Scope) -> str:
    """The term of the FTS5 table's ``scope_key`` for ``scope``: as revision 0011's triggers
    write it (``'s' || hex(tenant || char(31) || user || char(31) || agent)``), folded."""
    key = "\x1f".join((scope.tenant_id, scope.user_id, scope.agent_key))
    return "s" + key.encode("utf-8").hex()


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


def text_search_config(engine: Engine) -> str:
    """The text search configuration of PostgreSQL's ``search_vector`` column (revision 0011
    chose it), read once per engine."""
    known = _CONFIGS.get(engine)
    if known is None:
        with engine.connect() as conn:
            expression = conn.exec_driver_sql(_COLUMN_EXPRESSION).scalar()
        found = re.search(r"'([^']+)'::regconfig", expression or "")
        known = _CONFIGS[engine] = found.group(1) if found else "simple"
    return known


_CONFIGS: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
_COLUMN_EXPRESSION = """
SELECT pg_get_expr(d.adbin, d.adrelid)
FROM pg_attrdef AS d JOIN pg_attribute AS a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
WHERE d.adrelid = 'memory_facts'::regclass AND a.attname = 'search_vector'"""


class _RegConfigType(sa.types.UserDefinedType):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "regconfig"


class _TSQueryType(sa.types.UserDefinedType):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "tsquery"


class _TSVectorType(sa.types.UserDefinedType):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "tsvector"


_REGCONFIG = _RegConfigType()
_TSQUERY = _TSQueryType()
_TSVECTOR = _TSVectorType()


def _quoted_lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _quoted_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _named(sql: str) -> str:
    """psycopg's ``%(name)s`` parameters as SQLAlchemy's ``:name`` (for its text())."""
    return re.sub(r"%\((\w+)\)s", r":\1", sql)
