"""Revision 0011 on both databases: facts stored before it are indexed by it (search_text filled,
the tsvector or FTS5 table built), the index follows writes made straight in SQL, and the
downgrade removes every object it made."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from memory_sql import Fact, Scope, migrations, ops
from memory_sql.database import create_engine
from memory_sql.schema import memory_facts, memory_scopes
from memory_sql.storage import SQLStorage
from memory_sql.text_search import query_terms, search_text

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
SCOPE = {"tenant_id": "acme", "user_id": "u1", "agent_name": ""}
FACTS = {
    "fact_a": "Deploys with pnpm, never npm",
    "fact_b": "我每天早上喝咖啡",
    "fact_c": "Wohnt an der Straße",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'at-0010.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    migrations.upgrade(engine, "0010")
    yield engine
    engine.dispose()


def _objects(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            rows = conn.exec_driver_sql(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'memory_facts'::regclass "
                "AND attname = 'search_vector' UNION "
                "SELECT indexname FROM pg_indexes WHERE indexname = 'ix_memory_facts_search'"
            )
        else:
            rows = conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE name LIKE 'memory_facts_fts%'"
            )
        return {row[0] for row in rows}


def _columns(engine: sa.Engine) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns("memory_facts")}


def test_existing_facts_are_indexed_and_the_downgrade_removes_the_index(engine):
    with engine.begin() as conn:
        conn.execute(
            sa.insert(memory_scopes).values(**SCOPE, version=1, created_at=T0, updated_at=T0)
        )
        conn.execute(
            sa.text(
                "INSERT INTO memory_facts (tenant_id, user_id, agent_name, fact_id, content, "
                "content_key, category, confidence, created_at, updated_at) VALUES "
                "('acme', 'u1', '', :f, :c, :f, 'context', 0.9, :d, :d)"
            ),
            [{"f": fact_id, "c": content, "d": T0} for fact_id, content in FACTS.items()],
        )
    assert "search_text" not in _columns(engine) and _objects(engine) == set()

    migrations.upgrade(engine)
    assert {"search_text", "access_count", "last_accessed_at"} <= _columns(engine)
    assert _objects(engine)
    assert migrations.check(engine) is None  # the index objects are not drift
    with engine.connect() as conn:
        query = sa.select(memory_facts.c.fact_id, memory_facts.c.search_text)
        stored = dict(conn.execute(query).all())
    assert stored == {fact_id: search_text(content) for fact_id, content in FACTS.items()}
    scope = Scope.of(user_id="u1", tenant_id="acme")
    with SQLStorage(engine) as storage:
        doc = storage.load(**scope.arguments())
        assert [i for i, _ in storage.match_facts(doc, scope, ["pnpm"])] == ["fact_a"]
        assert [i for i, _ in storage.match_facts(doc, scope, ["咖", "啡"])] == ["fact_b"]
        assert [i for i, _ in storage.match_facts(doc, scope, ["strass"])] == ["fact_c"]
        # a write straight in SQL, not through the storage: the index follows it
        with engine.begin() as conn:
            conn.execute(
                sa.update(memory_facts)
                .where(memory_facts.c.fact_id == "fact_a")
                .values(search_text=search_text("Deploys with yarn"))
            )
            conn.execute(sa.delete(memory_facts).where(memory_facts.c.fact_id == "fact_c"))
        assert storage.match_facts(doc, scope, ["pnpm"]) == []
        assert [i for i, _ in storage.match_facts(doc, scope, ["yarn"])] == ["fact_a"]
        assert storage.match_facts(doc, scope, ["strass"]) == []

    migrations.downgrade(engine, "0010")
    assert "search_text" not in _columns(engine) and _objects(engine) == set()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM memory_facts")).scalar_one() == 2
    migrations.upgrade(engine)
    assert _objects(engine) and migrations.check(engine) is None


@pytest.mark.postgres
def test_the_postgresql_text_search_configuration_is_chosen_at_upgrade(new_pg_database):
    from memory_sql.errors import ConfigError
    from memory_sql.storage.search import text_search_config

    bad = create_engine(new_pg_database())
    try:
        migrations.upgrade(bad, "0010")
        with pytest.raises(ConfigError, match="'klingon' is not a text search configuration"):
            migrations.upgrade(bad, text_search_config="klingon")
        assert migrations.current_revision(bad) == "0010"  # 0011 rolled back whole
    finally:
        bad.dispose()
    engine = create_engine(new_pg_database())
    try:
        migrations.upgrade(engine, text_search_config="english")
        assert text_search_config(engine) == "english"
        assert migrations.check(engine) is None
        scope = Scope.of(user_id="u1", tenant_id="acme")
        with SQLStorage(engine) as storage:
            doc = storage.load(**scope.arguments())
            doc.facts = [Fact(content="Goes running every morning"), Fact(content="Hates the rain")]
            storage.save(doc, **scope.arguments())
            doc = storage.load(**scope.arguments())
            running = next(f.id for f in doc.facts if "running" in f.content)
            terms = query_terms("who runs in the mornings?")
            assert [i for i, _ in storage.match_facts(doc, scope, terms)] == [running]
            found = ops.search_facts(engine, "morning run", user_id="u1", tenant_id="acme")
            assert [r.fact.id for r in found] == [running]
    finally:
        engine.dispose()
