"""Revision 0020 on both databases: three indexes no statement needs are gone (the facts'
``(tenant_id, created_at)`` and live ``(scope, confidence)``, the events' ``(tenant_id,
occurred_at)``) and come back on downgrade, as PostgreSQL's fill factor of the facts goes
back to the default; loads, one memory's search by confidence, the full-text search and the
activity report give the same answers on either side of it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from memory_sql import Fact, Scope, migrations, ops
from memory_sql.database import create_engine
from memory_sql.schema import memory_facts
from memory_sql.storage import SQLStorage
from memory_sql.storage.reports import build_report

SCOPE = Scope.of(user_id="u1", tenant_id="acme")
FACTS = {
    "ix_memory_facts_tenant_created_at": ["tenant_id", "created_at"],
    "ix_memory_facts_scope_confidence": ["tenant_id", "user_id", "agent_name", "confidence"],
}
EVENTS = {"ix_memory_fact_events_tenant_occurred_at": ["tenant_id", "occurred_at"]}


@pytest.fixture(
    params=["sqlite", pytest.param("own_pg", id="postgresql", marks=pytest.mark.postgres)]
)
def engine(request: pytest.FixtureRequest):
    """A database of the test's own at the schema head (it downgrades and upgrades it)."""
    engine = create_engine(request.getfixturevalue(f"{request.param}_url"))
    yield engine
    engine.dispose()


def _indexes(engine: sa.Engine, table: str) -> dict[str, list[str | None]]:
    inspector = sa.inspect(engine)
    return {ix["name"]: ix["column_names"] for ix in inspector.get_indexes(table)}


def _definitions(engine: sa.Engine) -> dict[str, str]:
    """Each index's SQL as the database keeps it."""
    if engine.dialect.name == "postgresql":
        query = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
    else:
        query = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    with engine.connect() as conn:
        return dict(conn.exec_driver_sql(query).tuples().all())


def _fill_factor(engine: sa.Engine) -> list[str] | None:
    """``memory_facts``' storage parameters on PostgreSQL (None: SQLite has none)."""
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        query = "SELECT reloptions FROM pg_class WHERE relname = 'memory_facts'"
        return conn.exec_driver_sql(query).scalar() or []


def _answers(engine: sa.Engine) -> tuple[list[str], list[str], list[str], int]:
    """The memory's facts as loaded, one memory's search by confidence, a full-text search,
    and today's additions in the tenant's activity report."""
    with SQLStorage(engine) as storage:
        loaded = sorted(f.content for f in storage.load(**SCOPE.arguments()).facts)
    by_confidence = [
        r.fact.content
        for r in ops.search_facts(engine, tenant_id="acme", user_id="u1", agent_name="")
    ]
    found = [r.fact.content for r in ops.search_facts(engine, "tea", tenant_id="acme")]
    today = datetime.now(timezone.utc).date()
    report = build_report(engine, tenant_id="acme", days=1, today=today)
    return loaded, by_confidence, found, report["activity"][-1]["added"]


def _add(engine: sa.Engine, content: str, confidence: float) -> None:
    with SQLStorage(engine) as storage:
        doc = storage.load(**SCOPE.arguments())
        doc.facts.append(Fact(content=content, confidence=confidence))
        storage.save(doc, **SCOPE.arguments())


def test_the_indexes_are_dropped_up_and_built_again_down(engine):
    assert not FACTS.keys() & _indexes(engine, "memory_facts").keys()
    assert not EVENTS.keys() & _indexes(engine, "memory_fact_events").keys()
    assert "uq_memory_facts_live_content_key" in _indexes(engine, "memory_facts")  # kept
    postgresql = engine.dialect.name == "postgresql"
    assert _fill_factor(engine) == (["fillfactor=90"] if postgresql else None)
    _add(engine, "Drinks green tea", 0.6)
    _add(engine, "Runs on Sundays", 0.9)
    at_head = _answers(engine)
    assert at_head == (
        ["Drinks green tea", "Runs on Sundays"],
        ["Runs on Sundays", "Drinks green tea"],
        ["Drinks green tea"],
        2,
    )

    migrations.downgrade(engine, "0019")
    assert {name: _indexes(engine, "memory_facts").get(name) for name in FACTS} == FACTS
    assert {name: _indexes(engine, "memory_fact_events").get(name) for name in EVENTS} == EVENTS
    assert _fill_factor(engine) == ([] if postgresql else None)
    confidence = _definitions(engine)["ix_memory_facts_scope_confidence"]
    assert "confidence DESC" in confidence and "valid_to IS NULL" in confidence
    with engine.begin() as conn:  # the rebuilt index holds the rows, and follows a write
        conn.execute(sa.update(memory_facts).values(confidence=memory_facts.c.confidence / 2))
        by_index = sa.select(sa.func.count()).where(
            memory_facts.c.tenant_id == "acme", memory_facts.c.created_at.is_not(None)
        )
        assert conn.execute(by_index).scalar() == 2

    migrations.upgrade(engine)
    assert not FACTS.keys() & _indexes(engine, "memory_facts").keys()
    assert not EVENTS.keys() & _indexes(engine, "memory_fact_events").keys()
    assert _fill_factor(engine) == (["fillfactor=90"] if postgresql else None)
    assert migrations.check(engine) is None  # the schema is the models' again
    assert _answers(engine) == at_head
    _add(engine, "Reads at night", 0.2)  # below the halved 0.3
    loaded, by_confidence, found, added = _answers(engine)
    assert loaded == ["Drinks green tea", "Reads at night", "Runs on Sundays"]
    assert by_confidence == ["Runs on Sundays", "Drinks green tea", "Reads at night"]
    assert (found, added) == (["Drinks green tea"], 3)
