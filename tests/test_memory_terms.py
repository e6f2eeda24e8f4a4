"""The in-process inverted index of a memory (storage/memory_terms.py) against the database's
own full-text match, on real PostgreSQL and SQLite: the same facts, the same BM25 scores, the
same order; rebuilt when the memory's version moves; bounded."""

from __future__ import annotations

import uuid

import pytest

from memory_sql.models import Fact, MemoryDocument
from memory_sql.scope import Scope
from memory_sql.storage import SQLStorage
from memory_sql.storage.dialects import dialect_of, pg_scope_term
from memory_sql.storage.memory_terms import FTS5, OKAPI, MemoryTerms
from memory_sql.text_search import query_terms

TEXTS = [
    "Prefers Python over Java for new projects",
    "Database of choice is PostgreSQL",
    "Favourite café is Café Luzeiro",
    "Python scripts deploy the cafe's website",
    "Deploys services with Kubernetes on AWS",
    "Deployed the billing service to AWS twice",
    "我每天早上喝咖啡",
    "Zephyr is the notification service",
    "Zephyr is written in Go",
    "Zephyr went down on 3 March because of a full disk",
    "Plays the cello on weekends",
    "Reads science fiction before bed",
]
QUERIES = [
    "python",
    "pyth",
    "cafe",
    "which service deploys to aws",
    "咖啡",
    "zephyr service go",
    "nothing matches this",
    "s",
]


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_url")


def saved(storage: SQLStorage, user: str, texts: list[str]) -> MemoryDocument:
    doc = MemoryDocument()
    doc.facts = [Fact(id=f"f{n:03d}", content=text, confidence=0.9) for n, text in enumerate(texts)]
    storage.save(doc, user_id=user)
    return storage.load(user_id=user)


def test_same_matches_and_scores_as_the_database(db_url: str) -> None:
    storage = SQLStorage(db_url)
    try:
        user = f"u{uuid.uuid4().hex[:10]}"
        doc = saved(storage, user, TEXTS)
        scope = Scope.of(user_id=user)
        postgres = dialect_of(storage.engine).raw_fts
        terms_index = MemoryTerms(OKAPI if postgres else FTS5)
        # FTS5 counts its whole table: the same scores when it holds this memory alone
        alone = postgres or storage.engine.connect().__enter__().exec_driver_sql(
            "SELECT count(*) FROM memory_facts"
        ).scalar_one() == len(TEXTS)
        for query in QUERIES:
            terms = query_terms(query)
            expected = storage.match_facts(doc, scope, terms, limit=5)
            got = terms_index.match_memory(doc, scope, terms, limit=5)
            assert [fact_id for fact_id, _ in got] == [fact_id for fact_id, _ in expected], query
            # PostgreSQL's tsvector holds the memory's scope term ('s' and 32 hex digits): a
            # term starting it reads every fact, whose lengths then make its average
            quirk = postgres and any(pg_scope_term(scope).startswith(t) for t in terms)
            if alone and not quirk:
                for (_, mine), (_, theirs) in zip(got, expected, strict=True):
                    assert mine == pytest.approx(theirs, rel=1e-9), query
        assert terms_index.builds == 1  # one index for every query of this version
    finally:
        storage.close()


def test_a_new_version_rebuilds_it(db_url: str) -> None:
    storage = SQLStorage(db_url)
    try:
        user = f"u{uuid.uuid4().hex[:10]}"
        doc = saved(storage, user, TEXTS[:3])
        scope = Scope.of(user_id=user)
        index = MemoryTerms()
        assert index.match_memory(doc, scope, ["zephyr"]) == []
        doc.facts.append(Fact(id="f999", content="Zephyr is the notification service"))
        storage.save(doc, user_id=user, expected_version=doc.version)
        doc = storage.load(user_id=user)
        assert [fact_id for fact_id, _ in index.match_memory(doc, scope, ["zephyr"])] == ["f999"]
        assert index.builds == 2
    finally:
        storage.close()


def test_bounded_by_facts_held() -> None:
    index = MemoryTerms(max_facts=6)
    docs = []
    for n in range(3):
        doc = MemoryDocument()
        doc.version = 1
        doc.facts = [Fact(id=f"f{n}{k}", content=f"fact {k} of memory {n}") for k in range(3)]
        docs.append((Scope.of(user_id=f"user{n}"), doc))
    for scope, doc in docs:
        assert len(index.match_memory(doc, scope, ["memory"], limit=10)) == 3
    assert index.builds == 3
    assert index._held == 6  # the oldest memory's index went
    scope, doc = docs[0]
    index.match_memory(doc, scope, ["memory"])
    assert index.builds == 4
    scope, doc = docs[2]
    index.match_memory(doc, scope, ["memory"])  # the newest was kept
    assert index.builds == 4


def test_formula_is_checked() -> None:
    with pytest.raises(ValueError):
        MemoryTerms("tfidf")
