"""Revision 0018 on both databases: the searchable text of facts written by the tokenizer before
it is recomputed (accents folded, marks kept in words, unspaced scripts in pairs), so the index
finds "Café" by ``cafe``; facts all in ASCII are not rewritten; the downgrade writes the old text
back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import sqlalchemy as sa

from memory_sql import Fact, MemoryDocument, Scope, migrations, ops
from memory_sql.database import create_engine
from memory_sql.schema import memory_facts
from memory_sql.storage import SQLStorage
from memory_sql.storage.search import rebuild_sqlite_index
from memory_sql.text_search import query_terms, search_text

_spec = importlib.util.spec_from_file_location(
    "revision_0018",
    Path(__file__).parents[1] / "alembic" / "versions" / "0018_search_folding.py",
)
revision = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(revision)
previous_search_text = revision._previous_search_text

SCOPE = Scope.of(user_id="u1", tenant_id="acme")
FACTS = [
    "Meets friends at Café Luzeiro",
    "Deploys with pnpm, never npm",
    "ชอบกาแฟเย็น",
    "हिन्दी सीख रहा है",
    "Wohnt an der Straße",
]
UNTOUCHED = "sentinel: an ASCII fact is not read again"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'search.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()


def _stored(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        query = sa.select(memory_facts.c.content, memory_facts.c.search_text)
        return dict(conn.execute(query).all())


def _found(engine: sa.Engine, text: str) -> tuple[list[str], list[str]]:
    """What search and the context's lookup find for ``text``."""
    searched = [r.fact.content for r in ops.search_facts(engine, text, tenant_id="acme")]
    with SQLStorage(engine) as storage:
        doc = storage.load(**SCOPE.arguments())
        by_id = {fact.id: fact.content for fact in doc.facts}
        matched = storage.match_facts(doc, SCOPE, query_terms(text))
    return searched, [by_id[fact_id] for fact_id, _ in matched]


def test_the_text_is_written_back_down_and_recomputed_up(engine):
    with SQLStorage(engine) as storage:
        storage.save(MemoryDocument(facts=[Fact(content=c) for c in FACTS]), **SCOPE.arguments())
    cafe = ["Meets friends at Café Luzeiro"]
    assert _found(engine, "cafe") == (cafe, cafe)

    migrations.downgrade(engine, revision.down_revision)
    assert previous_search_text(FACTS[0]) != search_text(FACTS[0])
    assert _stored(engine) == {c: previous_search_text(c) for c in FACTS}
    with engine.begin() as conn:  # an ASCII fact is not read again: its text stays as it is
        conn.execute(
            sa.update(memory_facts)
            .where(memory_facts.c.content == FACTS[1])
            .values(search_text=UNTOUCHED)
        )

    migrations.upgrade(engine)
    stored = _stored(engine)
    assert stored == {c: UNTOUCHED if c == FACTS[1] else search_text(c) for c in FACTS}
    assert _found(engine, "cafe") == _found(engine, "CAFÉ") == (cafe, cafe)
    assert _found(engine, "กาแฟ") == (["ชอบกาแฟเย็น"], ["ชอบกาแฟเย็น"])
    assert _found(engine, "हिन्दी") == (["हिन्दी सीख रहा है"], ["हिन्दी सीख रहा है"])
    assert migrations.check(engine) is None
    if engine.dialect.name == "sqlite":  # the index is rebuilt from the recomputed column
        assert rebuild_sqlite_index(engine) == len(FACTS)
        assert _found(engine, "cafe") == (cafe, cafe)
