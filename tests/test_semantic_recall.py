"""Recall by meaning (issue #31): the real all-MiniLM-L6-v2 served over real HTTP on 127.0.0.1
(``memory_sql.demo.embeddings_server``), the real ``openai`` client, real SQLite and
PostgreSQL. Vectors are written after the save by the service's embedding thread; the context
fuses the vector ranking with the full-text one; a late or failing endpoint leaves it lexical."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
import sqlalchemy as sa
from llm_server import LABELS, llm_config

from memory_sql import MemoryConfig
from memory_sql.embeddings import Embedder
from memory_sql.models import Fact, MemoryDocument
from memory_sql.ops.search import search_facts
from memory_sql.schema import memory_fact_vectors
from memory_sql.scope import Scope
from memory_sql.service import MemoryService
from memory_sql.storage import SQLStorage
from memory_sql.storage.vectors import FactVectors
from memory_sql.update.embedding import EmbeddingPass

FACTS = [
    "I adopted a beagle named Max",
    "Allergic to peanuts",
    "Prefers Python over Java for new projects",
    "Database of choice is PostgreSQL",
    "Lives in Lisbon near the river",
    "Works as a backend engineer at Acme",
    "Plays the cello on weekends",
    "Is training for a marathon in April",
    "Drinks oat milk in coffee",
    "Has two children, Ana and Rui",
    "Uses Neovim as the main editor",
    "Favourite café is Café Luzeiro",
    "Reads science fiction before bed",
    "Commutes by bicycle",
    "Wants to learn Japanese this year",
    "Deploys services with Kubernetes on AWS",
    "Dislikes long meetings",
    "Prefers dark mode in every application",
    "Keeps a vegetable garden with tomatoes",
    "Supports Benfica football club",
]


@pytest.fixture(
    params=["sqlite", pytest.param("own_pg", id="postgresql", marks=pytest.mark.postgres)]
)
def db_url(request: pytest.FixtureRequest) -> str:
    """A database of the test's own: its flush must meet no other test's queue rows (another
    test's failed run waiting for its retry makes a flush answer False)."""
    return request.getfixturevalue(f"{request.param}_url")


def semantic_config(server, db_url: str, **overrides) -> MemoryConfig:
    settings = {
        "storage": db_url,
        "embedding_base_url": server.base_url,
        "embedding_model": "all-MiniLM-L6-v2",
        "embedding_query_timeout_seconds": 5.0,
        "embedding_retry_seconds": 0.1,
    }
    return MemoryConfig(**(settings | overrides))


def seeded(db_url: str, contents=FACTS) -> tuple[Scope, dict[str, str]]:
    """A new memory holding ``contents``; returns its scope and the facts' ids by content."""
    scope = Scope.of(user_id=f"user-{uuid.uuid4().hex[:10]}", agent_name="coder")
    facts = [Fact(content=c, category="context", confidence=0.9) for c in contents]
    with SQLStorage(db_url) as storage:
        storage.save(MemoryDocument(facts=facts), **scope.arguments())
    return scope, {f.content: f.id for f in facts}


def test_the_local_model_gives_the_reference_cosines(embedding_server):
    """sentence-transformers' quickstart for this model prints cosines 0.6660 (paraphrases),
    0.1046 and 0.1411 (unrelated): the numpy forward pass over HTTP gives the same."""
    embedder = Embedder(base_url=embedding_server.base_url, model="all-MiniLM-L6-v2")
    vectors = embedder.embed(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    cosines = vectors @ vectors.T
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosines[0, 1] == pytest.approx(0.6660, abs=1e-3)
    assert cosines[0, 2] == pytest.approx(0.1046, abs=1e-3)
    assert cosines[1, 2] == pytest.approx(0.1411, abs=1e-3)
    embedder.close()


def test_context_finds_facts_by_meaning(embedding_server, db_url):
    scope, ids = seeded(db_url)
    lexical = MemoryService(MemoryConfig(storage=db_url), start=False)
    service = MemoryService(semantic_config(embedding_server, db_url))
    try:
        assert service.flush(timeout=30)  # the sweep at start embeds the seeded facts
        doc = service.load(**scope.arguments())
        # (the fact, within how many places): a small model ranks "food restrictions" third,
        # behind other food facts; the lexical ranking finds none of them
        questions = {
            "what pet do I have?": ("I adopted a beagle named Max", 1),
            "which database should I use for the new project?": (
                "Database of choice is PostgreSQL",
                1,
            ),
            "any food restrictions for dinner?": ("Allergic to peanuts", 3),
        }
        for question, (expected, places) in questions.items():
            hybrid = service.recall.ranking(doc, scope, question)
            plain = lexical.recall.ranking(doc, scope, question)
            assert ids[expected] in hybrid[:places], question
            assert ids[expected] not in plain[:places], question
        block = service.memory_context(**scope.arguments(), query="what pet do I have?")
        assert block.index("beagle") < block.index("peanuts")
        assert service.status()["embedding_query_fallbacks"] == 0
        where = {
            "tenant_id": scope.tenant_id,
            "user_id": scope.user_id,
            "agent_name": scope.agent_key,
        }
        engine = service.storage.engine
        found = search_facts(engine, "which pet lives with me?", **where, recall=service.recall)
        plain = search_facts(engine, "which pet lives with me?", **where)
        assert found[0].fact.id == ids["I adopted a beagle named Max"]
        assert len(found) < len(FACTS)  # facts far in meaning are not found
        assert ids["I adopted a beagle named Max"] not in [r.fact.id for r in plain]
    finally:
        service.close()
        lexical.close()


def test_a_late_endpoint_leaves_the_context_lexical_and_counts_it(embedding_server, db_url):
    scope, ids = seeded(db_url)
    config = semantic_config(embedding_server, db_url, embedding_query_timeout_seconds=0.2)
    service = MemoryService(config)
    try:
        assert service.flush(timeout=30)
        doc = service.load(**scope.arguments())
        embedding_server.delay = 1.0
        started = time.monotonic()
        ranked = service.recall.ranking(doc, scope, "what pet do I have, a dog?")
        took = time.monotonic() - started
    finally:
        embedding_server.delay = 0.0
        service.close()
    assert took < 0.9
    assert ids["I adopted a beagle named Max"] not in ranked[:1]
    assert service.embedder.stats.query_failures == 1


def test_the_worker_embeds_what_an_update_saved(embedding_server, db_url, llm):
    fact = {"content": "Owns a grey cat called Miso", "category": "context", "confidence": 0.9}
    llm.responder = lambda body: json.dumps(
        {"user": {}, "history": {}, "newFacts": [{**fact, **LABELS}], "factsToRemove": []}
    )
    config = llm_config(
        llm,
        storage=db_url,
        debounce_seconds=0.1,
        embedding_base_url=embedding_server.base_url,
        embedding_model="all-MiniLM-L6-v2",
        embedding_query_timeout_seconds=5.0,
    )
    scope = Scope.of(user_id=f"user-{uuid.uuid4().hex[:10]}", agent_name="coder")
    with MemoryService(config) as service:
        service.after_agent(
            [
                {"role": "user", "content": "My cat Miso is grey"},
                {"role": "assistant", "content": "Lovely."},
            ],
            thread_id="t1",
            **scope.arguments(),
        )
        assert service.flush(timeout=30)
        doc = service.load(**scope.arguments())
        assert [f.content for f in doc.facts] == ["Owns a grey cat called Miso"]
        ids, rows = service.vectors.matrix(scope, doc.facts)
        assert ids == [doc.facts[0].id] and rows.shape == (1, 384)
        assert service.recall.ranking(doc, scope, "which pet lives with me?") == ids


def test_a_changed_text_is_embedded_again_and_models_do_not_mix(embedding_server, db_url):
    scope, ids = seeded(db_url, FACTS[:4])
    embedder = Embedder(base_url=embedding_server.base_url, model="all-MiniLM-L6-v2")
    with SQLStorage(db_url) as storage:
        vectors = FactVectors(storage.engine, embedder.key)
        embedding = EmbeddingPass(embedder, vectors)
        assert embedding.embed_memory(scope) == 4
        assert embedding.embed_memory(scope) == 0
        doc = storage.load(**scope.arguments())
        pet = ids["I adopted a beagle named Max"]
        doc.facts = [
            f.replace(content="I adopted a tabby cat named Max") if f.id == pet else f
            for f in doc.facts
        ]
        storage.save(doc, **scope.arguments(), expected_version=doc.version)
        assert [u.fact_id for u in vectors.unembedded(scope=scope)] == [pet]
        assert embedding.embed_memory(scope) == 1
        doc = storage.load(**scope.arguments())
        found, rows = vectors.matrix(scope, doc.facts)
        assert len(found) == 4
        cat = embedder.embed(["a cat"])[0]
        assert found[int(np.argmax(rows @ cat))] == pet
        other = FactVectors(storage.engine, "another-model")
        assert len(other.unembedded(scope=scope)) == 4
        assert other.matrix(scope, doc.facts)[0] == []
    embedder.close()


def test_failed_embedding_passes_are_retried_and_counted(embedding_server, db_url):
    scope, _ = seeded(db_url, FACTS[:3])
    embedding_server.fail_next = 2
    service = MemoryService(semantic_config(embedding_server, db_url))
    try:
        assert service.flush(timeout=30)
        doc = service.load(**scope.arguments())
        assert len(service.vectors.matrix(scope, doc.facts)[0]) == 3
        assert service.embedding.failed_passes == 2
        assert service.status()["embedding_failures"] == 2
    finally:
        embedding_server.fail_next = 0
        service.close()


def test_forgetting_a_fact_or_a_user_deletes_its_vectors(embedding_server, db_url):
    scope, _ = seeded(db_url, FACTS[:3])
    embedder = Embedder(base_url=embedding_server.base_url, model="all-MiniLM-L6-v2")
    with SQLStorage(db_url) as storage:
        EmbeddingPass(embedder, FactVectors(storage.engine, embedder.key)).embed_memory(scope)
        where = memory_fact_vectors.c.user_id == scope.user_id
        count = sa.select(sa.func.count()).select_from(memory_fact_vectors).where(where)
        with storage.engine.connect() as conn:
            assert conn.execute(count).scalar_one() == 3
        with storage.engine.begin() as conn:
            conn.exec_driver_sql(
                "DELETE FROM memory_scopes WHERE user_id = :u"
                if "sqlite" in db_url
                else "DELETE FROM memory_scopes WHERE user_id = %(u)s",
                {"u": scope.user_id},
            )
        with storage.engine.connect() as conn:
            assert conn.execute(count).scalar_one() == 0
    embedder.close()


def test_db_embed_embeds_every_fact_lacking_a_vector(embedding_server, sqlite_url):
    scope, _ = seeded(sqlite_url)
    env = {
        "MEMORY_SQL_EMBEDDING_BASE_URL": embedding_server.base_url,
        "MEMORY_SQL_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
        "MEMORY_SQL_EMBEDDING_BATCH_SIZE": "8",
        "PATH": "/usr/bin:/bin",
    }
    command = [sys.executable, "-m", "memory_sql", "db", "embed", "--url", sqlite_url]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert f"embedded {len(FACTS)} facts" in first.stdout
    assert "0 facts left" in first.stdout
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "embedded 0 facts" in again.stdout
    unset = subprocess.run(
        command, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60
    )
    assert unset.returncode != 0 and "embedding_base_url" in unset.stderr + unset.stdout


def test_particulars_keep_apart_what_a_sentence_embedding_merges():
    from memory_sql.update.dedupe import particulars_agree

    assert particulars_agree(
        "Esra Varga reports to Oscar Kowalski", "Oscar Kowalski is Esra Varga's manager"
    )
    assert particulars_agree(
        "Bought running shoes from Decathlon in September 2025",
        "Purchased running shoes at Decathlon in September 2025",
    )
    assert not particulars_agree(
        "Watched Anatomy of a Fall with Jonas on 27 August 2024",
        "Watched Anatomy of a Fall with Rui on 5 May 2025",
    )
    assert not particulars_agree("Sierra is written in Java", "Sierra is written in Kotlin")
    assert not particulars_agree(
        "深圳办公室的陈静负责Atlas的产品工作", "深圳办公室的赵敏负责Atlas的设计工作"
    )


def test_a_restated_fact_confirms_the_one_held_and_a_distinct_one_is_added(
    embedding_server, db_url, llm
):
    held = [
        "Bought running shoes from Decathlon in September 2025",
        "Watched Anatomy of a Fall with Jonas on 27 August 2024",
    ]
    scope, ids = seeded(db_url, held)
    said = [
        "Purchased running shoes at Decathlon in September 2025",  # the same, reworded
        "Watched Anatomy of a Fall with Rui on 5 May 2025",  # another evening
    ]
    llm.responder = lambda body: json.dumps(
        {
            "user": {},
            "history": {},
            "newFacts": [
                {"content": c, "category": "context", "confidence": 0.9, **LABELS} for c in said
            ],
            "factsToRemove": [],
        }
    )
    config = llm_config(
        llm,
        storage=db_url,
        debounce_seconds=0.1,
        embedding_base_url=embedding_server.base_url,
        embedding_model="all-MiniLM-L6-v2",
        embedding_query_timeout_seconds=5.0,
    )
    with MemoryService(config) as service:
        assert service.flush(timeout=30)  # the held facts' vectors first
        service.after_agent(
            [
                {"role": "user", "content": "Got new running shoes; watched a film with Rui"},
                {"role": "assistant", "content": "Nice."},
            ],
            thread_id="t1",
            **scope.arguments(),
        )
        assert service.flush(timeout=30)
        doc = service.load(**scope.arguments())
    contents = sorted(f.content for f in doc.facts)
    assert contents == sorted([*held, said[1]])
    shoes = next(f for f in doc.facts if f.id == ids[held[0]])
    assert shoes.confirmation_count == 1


MULTI_HOP = [
    *FACTS,
    "Nimbus is the data warehouse loader",
    "Nimbus keeps everything in ClickHouse",
    "Harbor is the customs document service",
    "Harbor went down in February because of an expired TLS certificate",
]


def test_the_expansion_finds_the_second_hop(embedding_server, db_url):
    """A question names a project by its role; the fact that names it is found by text and
    meaning, and through its name (the expansion after the fusion) the fact that answers,
    which shares no word with the question. Without the expansion that fact is not near the
    top; the in-process index answers both lookups from one build."""
    scope, ids = seeded(db_url, MULTI_HOP)
    # (the answer, within how many places): the small model puts other facts about
    # databases beside the loader's
    hops = {
        "what engine sits under the data warehouse loader?": (
            "Nimbus keeps everything in ClickHouse",
            4,
        ),
        "has the customs document service had incidents?": (
            "Harbor went down in February because of an expired TLS certificate",
            2,
        ),
    }
    service = MemoryService(semantic_config(embedding_server, db_url))
    plain = MemoryService(
        semantic_config(embedding_server, db_url, recall_semantic_expansion_weight=0.0),
        start=False,
    )
    try:
        assert service.flush(timeout=30)
        doc = service.load(**scope.arguments())
        for question, (answer, places) in hops.items():
            expanded = service.recall.ranking(doc, scope, question)
            fused = plain.recall.ranking(doc, scope, question)
            assert ids[answer] in expanded[:places], question
            assert ids[answer] not in fused[:places], question
        assert service.recall.terms is not None and service.recall.terms.builds == 1
        assert service.status()["embedding_query_fallbacks"] == 0
    finally:
        service.close()
        plain.close()


def test_the_model_is_faster_and_the_same(embedding_server):
    """The forward pass as 2-D products (issue #31's throughput) gives the reference cosines
    over HTTP for a batch of mixed lengths as for each text alone."""
    embedder = Embedder(base_url=embedding_server.base_url, model="all-MiniLM-L6-v2")
    try:
        texts = [FACTS[0], " ".join(FACTS), "Allergic to peanuts", "我每天早上喝咖啡"]
        together = embedder.embed(texts)
        alone = np.stack([embedder.embed([text])[0] for text in texts])
        assert np.abs(together - alone).max() < 1e-5  # padding changes nothing
        assert float(together[0] @ together[2]) < 0.5  # a beagle is not a peanut
    finally:
        embedder.close()
