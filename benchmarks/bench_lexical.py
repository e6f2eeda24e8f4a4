"""The lexical matching rule of issue #31 against the one before it, in the same run.

    .venv/bin/python benchmarks/bench_lexical.py [postgresql] [sqlite] [--quick]

Two arms over the same databases (at revision 0018: accents folded in both), taking turns:

- **whole terms** (the context's rule before #31): a query term matches a fact's term equal to
  it, BM25 counts exact terms; search relevance on PostgreSQL is ``ts_rank_cd`` of the query
  (no term weights);
- **prefixes** (now, one rule for the context and search): a query term also matches the words
  it starts, BM25 counts them; PostgreSQL search weighs each term's ``ts_rank`` by its IDF.

Figures: evidence recall of the ranked context on ``bench_recall``'s data set (3 000 facts, 300
questions) at 500 / 1 000 / 2 000 tokens per arm; p50 of a ranked context at 10 000 facts
(budget 1 000 tokens), a question of the data set each call, the arms interleaved; and on
PostgreSQL the p50 of ``search_facts`` of two terms across 10 000 facts, relevance by
``ts_rank_cd`` vs IDF-weighted. Ratios are prefixes ÷ whole terms.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_recall as recall
import sqlalchemy as sa
from _common import analyze, fmt, percentile, scratch_postgres

import memory_sql
import memory_sql.storage.fact_search as fact_search
import memory_sql.storage.sql as sql_storage
from memory_sql import MemoryConfig, MemoryService
from memory_sql.database import create_engine
from memory_sql.ops import search_facts
from memory_sql.scope import Scope
from memory_sql.storage import dialects, search
from memory_sql.storage.dialects import dialect_of
from memory_sql.text_search import query_terms

WHOLE, PREFIX = "whole terms", "prefixes"


def whole_terms_match(
    engine: sa.Engine, scope: Scope, terms: Sequence[str], *, facts: int, limit: int
) -> list[tuple[str, float]]:
    """``search.match_facts`` as it was before #31: whole terms only."""
    if not terms:
        return []
    dialect = dialect_of(engine)
    if engine.dialect.name == "postgresql":
        params = {
            "memory": dialects._quoted_lexeme(search.pg_scope_term(scope)),
            "config": search.text_search_config(engine),
            "query": " | ".join(dialects._quoted_lexeme(term) for term in terms),
            "most": search.MAX_MATCHING,
        }
        rows = search._rows(engine, dialect, params)
        key = (scope.tenant_id, scope.user_id, scope.agent_key)
        own = [(row[0], row[1]) for row in rows if tuple(row[2:]) == key]
        return exact_bm25(own, terms, limit=limit, facts=facts)
    alternatives = " OR ".join(dialects._quoted_phrase(term) for term in terms)
    own_term = dialects._quoted_phrase(search.scope_term(scope))
    params = {
        "tenant": scope.tenant_id,
        "user": scope.user_id,
        "agent": scope.agent_key,
        "match": f"scope_key : {own_term} AND search_text : ({alternatives})",
        "limit": limit,
    }
    return [(r[0], float(r[1])) for r in search._rows(engine, dialect, params)]


def exact_bm25(
    documents: Sequence[tuple[str, str]], terms: Sequence[str], *, limit: int, facts: int
) -> list[tuple[str, float]]:
    """BM25 with exact term counts (the prefix-aware one, fed only exact matches)."""
    wanted = set(terms)
    exact = [(i, " ".join(w if w in wanted else "\x00" for w in t.split())) for i, t in documents]
    return search.bm25(exact, terms, limit=limit, facts=facts)


def rank_cd_condition(engine: sa.Engine, terms: Sequence[str]) -> tuple[Any, Any]:
    """PostgreSQL search before #31: ``ts_rank_cd`` of the whole query, no term weights."""
    condition, _ = search.search_condition(engine, terms)
    text = " & ".join(dialects._quoted_lexeme(term) + ":*" for term in terms)
    config = sa.cast(search.text_search_config(engine), dialects._REGCONFIG)
    query = sa.func.to_tsquery(config, text, type_=dialects._TSQUERY)
    vector = sa.literal_column("memory_facts.search_vector", dialects._TSVECTOR)
    return condition, sa.func.ts_rank_cd(vector, query)


@contextmanager
def arm(name: str) -> Iterator[None]:
    if name == PREFIX:
        yield
        return
    sql_storage.match_facts, fact_search.search_condition = whole_terms_match, rank_cd_condition
    try:
        yield
    finally:
        sql_storage.match_facts = search.match_facts
        fact_search.search_condition = search.search_condition


def interleaved(sides: dict[str, Callable[[], object]], number: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in sides}
    for name, run in sides.items():
        with arm(name):
            recall.time_calls(run, number=20)
    for _ in range(5):
        for name, run in sides.items():
            with arm(name):
                out[name] += recall.time_calls(run, number=max(number // 5, 1))
    return out


def run_backend(name: str, url: str, big: str, quick: bool) -> None:
    data = recall.load_data()
    questions = data["questions"][: 60 if quick else None]
    memory_sql.upgrade(url)
    recall.save_memory(url, recall.USER, recall.to_document(data, data["facts"]))
    if "postgresql" in url:
        analyze(url)
    print(f"\n{name}: evidence recall of the ranked context ({len(questions)} questions)")
    runs = {}
    for side in (WHOLE, PREFIX):
        with arm(side):
            skipped = dict.fromkeys((recall.BM25, recall.HYBRID, recall.HYBRID_SUM), "skipped")
            runs[side] = recall.recall_run(url, data, questions, skipped)
    print(f"  {'budget':>6}  {'group':<13} {WHOLE:>12} {PREFIX:>12}  change")
    for budget in recall.BUDGETS:
        for group in ("all", "lexical", "paraphrased", "CJK"):
            a, b = (runs[s].scores[(budget, recall.RANKED, group)].recall for s in (WHOLE, PREFIX))
            print(f"  {budget:>6}  {group:<13} {a:>11.1%} {b:>11.1%}  {100 * (b - a):+.1f} points")

    extra = recall.make_dataset.extra_facts(8_000, {f["content"] for f in data["facts"]})
    rows = (data["facts"] + extra)[:10_000]
    memory_sql.upgrade(big)
    recall.save_memory(big, "big", recall.to_document(data, rows))
    if "postgresql" in big:
        analyze(big)
    texts = iter([q["text"] for q in data["questions"]] * 1000)
    config = MemoryConfig(storage=big, max_facts=10_000, injected_memory_max_tokens=1000)
    calls = 60 if quick else 300
    with MemoryService(config, start=False) as service:
        context = lambda: service.memory_context(user_id="big", query=next(texts))  # noqa: E731
        got = interleaved({WHOLE: context, PREFIX: context}, calls)
    a, b = (percentile(got[s], 50) for s in (WHOLE, PREFIX))
    print(f"\n{name}: ranked context at 10,000 facts, p50: {WHOLE} {fmt(a)}, {PREFIX} {fmt(b)}")
    print(f"  prefixes ÷ whole terms: {b / a:.2f}x")
    if "postgresql" not in big:
        return
    words = [t for q in data["questions"] for t in query_terms(q["text"])]
    pairs = iter([" ".join(words[i : i + 2]) for i in range(0, len(words) - 1, 2)] * 100)
    engine = create_engine(big)
    try:
        searched = lambda: search_facts(engine, next(pairs), limit=50)  # noqa: E731
        got = interleaved({WHOLE: searched, PREFIX: searched}, calls)
    finally:
        engine.dispose()
    a, b = (percentile(got[s], 50) for s in (WHOLE, PREFIX))
    print(
        f"{name}: search_facts of two terms over 10,000 facts, p50: ts_rank_cd {fmt(a)},"
        f" IDF-weighted {fmt(b)} ({b / a:.2f}x)"
    )


def main() -> int:
    args = {arg.lower() for arg in sys.argv[1:]}
    quick = "--quick" in args
    only = args - {"--quick"}
    print(
        f"lexical rule, whole terms vs prefixes; {recall.os.cpu_count()} CPUs, load average"
        f" {recall.os.getloadavg()[0]:.2f} at the start"
    )
    if not only or "postgresql" in only:
        with scratch_postgres() as url, scratch_postgres() as big:
            if url is None or big is None:
                print("PostgreSQL: not reachable, skipped")
            else:
                run_backend("PostgreSQL", url, big, quick)
    if not only or "sqlite" in only:
        with tempfile.TemporaryDirectory(prefix="bench_lexical_") as folder:
            run_backend(
                "SQLite", f"sqlite:///{folder}/recall.db", f"sqlite:///{folder}/big.db", quick
            )
    print(f"\nload average {recall.os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
