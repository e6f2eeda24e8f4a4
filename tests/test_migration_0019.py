"""Revision 0019 on both databases: the facts' ``(tenant_id, updated_at)`` index is gone (no
statement reads by it, and every write of a fact paid for it) and comes back on downgrade;
the memory's facts load, save and search the same on either side of it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memory_sql import Fact, MemoryDocument, Scope, migrations, ops
from memory_sql.database import create_engine
from memory_sql.schema import memory_facts
from memory_sql.storage import SQLStorage

SCOPE = Scope.of(user_id="u1", tenant_id="acme")
INDEX = "ix_memory_facts_tenant_updated_at"


@pytest.fixture(
    params=["sqlite", pytest.param("own_pg", id="postgresql", marks=pytest.mark.postgres)]
)
def engine(request: pytest.FixtureRequest):
    """A database of the test's own at the schema head (it downgrades and upgrades it)."""
    engine = create_engine(request.getfixturevalue(f"{request.param}_url"))
    yield engine
    engine.dispose()


def _indexes(engine: sa.Engine) -> dict[str, list[str | None]]:
    return {ix["name"]: ix["column_names"] for ix in sa.inspect(engine).get_indexes("memory_facts")}


def _facts(engine: sa.Engine) -> list[str]:
    with SQLStorage(engine) as storage:
        return sorted(f.content for f in storage.load(**SCOPE.arguments()).facts)


def test_the_index_is_dropped_up_and_built_again_down(engine):
    assert INDEX not in _indexes(engine)
    assert "ix_memory_facts_tenant_category" in _indexes(engine)  # the others stay
    with SQLStorage(engine) as storage:
        storage.save(MemoryDocument(facts=[Fact(content="Drinks green tea")]), **SCOPE.arguments())

    migrations.downgrade(engine, "0018")
    assert _indexes(engine)[INDEX] == ["tenant_id", "updated_at"]
    with engine.begin() as conn:  # the rebuilt index holds the rows, and follows a write
        conn.execute(sa.update(memory_facts).values(updated_at=sa.func.current_timestamp()))
        by_index = sa.select(sa.func.count()).where(
            memory_facts.c.tenant_id == "acme", memory_facts.c.updated_at.is_not(None)
        )
        assert conn.execute(by_index).scalar() == 1

    migrations.upgrade(engine)
    assert INDEX not in _indexes(engine)
    assert migrations.check(engine) is None  # the schema is the models' again
    with SQLStorage(engine) as storage:  # saves and loads as before
        doc = storage.load(**SCOPE.arguments())
        doc.facts.append(Fact(content="Runs on Sundays"))
        storage.save(doc, **SCOPE.arguments())
    assert _facts(engine) == ["Drinks green tea", "Runs on Sundays"]
    found = [r.fact.content for r in ops.search_facts(engine, "tea", tenant_id="acme")]
    assert found == ["Drinks green tea"]
