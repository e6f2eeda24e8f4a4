"""Facts found and scored by the database's full-text index (revision 0011).

Two questions are asked of the index, with terms cut by :func:`memory_sql.text_search.query_terms`:

- :func:`match_facts`: which facts of one memory share terms with a query, each with its BM25
  score (``k1`` = 1.2, ``b`` = 0.75), highest first. Any term may match. This is the text
  relevance of ranked recall.
- :func:`search_condition`: a condition on ``memory_facts`` for a search across memories, true
  for a fact holding every term (each also as a prefix: ``pyth`` finds "Python"), and a
  relevance to order by.

PostgreSQL scores in SQL over the postings of the memory's matching rows (``unnest`` of the
generated ``tsvector``): BM25's document frequencies are the memory's own, the fact count is the
memory's, the average length that of the matching facts. SQLite asks FTS5, whose ``bm25()``
weighs terms by their frequency in the whole table, restricted to the memory by its scope term.
The JSON-file store, which has no index, scores the same BM25 in Python over the loaded memory
(:func:`score_in_memory`).

Terms are runs of letters and digits, so no text reaches the index as query syntax; they are
quoted all the same.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..models import Fact
from ..schema import memory_facts
from ..scope import Scope
from ..text_search import search_text
from .driver import DriverConnection, DriverFallback, unobserved

K1 = 1.2
B = 0.75

_PG_MATCH = """
WITH hits AS (
    SELECT f.fact_id, t.lexeme, cardinality(t.positions) AS tf, length(f.search_vector) AS dl
    FROM memory_facts AS f CROSS JOIN LATERAL unnest(f.search_vector) AS t
    WHERE f.tenant_id = %(tenant)s AND f.user_id = %(user)s AND f.agent_name = %(agent)s
      AND f.search_vector @@ CAST(%(query)s AS tsquery)
      AND t.lexeme = ANY(CAST(%(terms)s AS text[]))
),
df AS (SELECT lexeme, count(*) AS n FROM hits GROUP BY lexeme),
avgdl AS (SELECT greatest(avg(dl), 1) AS v FROM (SELECT DISTINCT fact_id, dl FROM hits) AS d)
SELECT h.fact_id,
       sum(ln(1 + (%(n)s - df.n + 0.5) / (df.n + 0.5))
           * h.tf * (%(k1)s + 1) / (h.tf + %(k1)s * (1 - %(b)s + %(b)s * h.dl / avgdl.v)))
FROM hits AS h JOIN df USING (lexeme) CROSS JOIN avgdl
GROUP BY h.fact_id
ORDER BY 2 DESC, h.fact_id
LIMIT %(limit)s"""

_SQLITE_MATCH = """
SELECT f.fact_id, -bm25(memory_facts_fts, 1.0, 0.0)
FROM memory_facts_fts JOIN memory_facts AS f ON f.rowid = memory_facts_fts.rowid
WHERE memory_facts_fts MATCH :match
  AND f.tenant_id = :tenant AND f.user_id = :user AND f.agent_name = :agent
ORDER BY bm25(memory_facts_fts, 1.0, 0.0), f.fact_id
LIMIT :limit"""


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
    where = {"tenant": scope.tenant_id, "user": scope.user_id, "agent": scope.agent_key}
    if engine.dialect.name == "postgresql":
        sql = _PG_MATCH
        params = {
            **where,
            "query": " | ".join(_quoted_lexeme(term) for term in terms),
            "terms": list(terms),
            "n": facts,
            "k1": K1,
            "b": B,
            "limit": limit,
        }
    else:
        sql = _SQLITE_MATCH
        alternatives = " OR ".join(_quoted_phrase(term) for term in terms)
        match = (
            f"scope_key : {_quoted_phrase(scope_term(scope))} AND search_text : ({alternatives})"
        )
        params = {**where, "match": match, "limit": limit}
    if unobserved(engine):
        try:
            with DriverConnection(engine) as dbapi:
                return [(row[0], float(row[1])) for row in dbapi.execute(sql, params).fetchall()]
        except DriverFallback:
            pass
    statement = sa.text(_named(sql) if engine.dialect.name == "postgresql" else sql)
    if engine.dialect.name == "postgresql":
        statement = statement.bindparams(sa.bindparam("terms", type_=sa.ARRAY(sa.Text)))
    with engine.connect() as conn:
        return [(row[0], float(row[1])) for row in conn.execute(statement, params)]


def search_condition(
    engine: Engine, terms: Sequence[str]
) -> tuple[sa.ColumnElement, sa.ColumnElement]:
    """A condition true for facts holding every term (each also as a prefix), and a relevance
    (higher is better) for them, for a search over ``memory_facts`` across memories."""
    if engine.dialect.name == "postgresql":
        query = sa.cast(" & ".join(_quoted_lexeme(term) + ":*" for term in terms), _TSQUERY)
        vector = sa.literal_column("memory_facts.search_vector", _TSVECTOR)
        return vector.op("@@")(query), sa.func.ts_rank_cd(vector, query)
    match = "search_text : (" + " AND ".join(_quoted_phrase(term) + " *" for term in terms) + ")"
    fts = sa.text(
        "SELECT rowid, bm25(memory_facts_fts, 1.0, 0.0) AS rank FROM memory_facts_fts "
        "WHERE memory_facts_fts MATCH :search_match"
    ).bindparams(search_match=match)
    hits = fts.columns(sa.column("rowid", sa.Integer), sa.column("rank", sa.Float)).subquery()
    rowid = sa.literal_column("memory_facts.rowid")
    relevance = sa.select(-hits.c.rank).where(hits.c.rowid == rowid).scalar_subquery()
    return rowid.in_(sa.select(hits.c.rowid)), relevance


def scope_term(scope: Scope) -> str:
    """The term of the FTS5 table's ``scope_key`` for ``scope``: as revision 0011's triggers
    write it (``'s' || hex(tenant || char(31) || user || char(31) || agent)``), folded."""
    key = "\x1f".join((scope.tenant_id, scope.user_id, scope.agent_key))
    return "s" + key.encode("utf-8").hex()


def score_in_memory(
    facts: Sequence[Fact], terms: Sequence[str], *, limit: int
) -> list[tuple[str, float]]:
    """:func:`match_facts` for a memory without an index: BM25 computed here over ``facts``."""
    wanted = set(terms)
    if not wanted or not facts:
        return []
    documents = [(fact.id, Counter(search_text(fact.content).split())) for fact in facts]
    average = max(sum(sum(counts.values()) for _, counts in documents) / len(documents), 1.0)
    frequency = Counter(term for _, counts in documents for term in wanted & counts.keys())
    n = len(documents)
    scored = []
    for fact_id, counts in documents:
        length = sum(counts.values())
        score = 0.0
        for term in wanted & counts.keys():
            tf = counts[term]
            idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        if score > 0:
            scored.append((fact_id, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


def rebuild_sqlite_index(engine: Engine) -> int:
    """Refill SQLite's ``memory_facts_fts`` from ``memory_facts`` (after a ``VACUUM`` or a
    rebuild of the table, which may renumber rowids); returns the facts indexed."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO memory_facts_fts (memory_facts_fts) VALUES ('delete-all')"
        )
        conn.exec_driver_sql(
            "INSERT INTO memory_facts_fts (rowid, search_text, scope_key) SELECT rowid, "
            "search_text, 's' || hex(tenant_id || char(31) || user_id || char(31) || agent_name) "
            "FROM memory_facts"
        )
        return conn.execute(sa.select(sa.func.count()).select_from(memory_facts)).scalar_one()


class _TSQueryType(sa.types.UserDefinedType):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "tsquery"


class _TSVectorType(sa.types.UserDefinedType):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "tsvector"


_TSQUERY = _TSQueryType()
_TSVECTOR = _TSVectorType()


def _quoted_lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _quoted_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _named(sql: str) -> str:
    """psycopg's ``%(name)s`` parameters as SQLAlchemy's ``:name`` (for its text())."""
    return re.sub(r"%\((\w+)\)s", r":\1", sql)
