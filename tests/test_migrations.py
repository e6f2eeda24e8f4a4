"""Alembic alone makes the schema: up from empty, down to base, up again, and no drift."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from conftest import assert_no_checked_out_connections

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.ops.reports import VIEW_NAMES

TABLES = {
    "memory_scopes",
    "memory_sections",
    "memory_facts",
    "memory_pending_updates",
    "memory_fact_events",
    "memory_llm_calls",
    "memory_watermarks",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    yield engine
    assert_no_checked_out_connections(engine)
    engine.dispose()


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}


def test_empty_to_head_to_base_to_head(empty_engine):
    assert migrations.current_revision(empty_engine) is None
    assert _tables(empty_engine) == set()

    migrations.upgrade(empty_engine)
    assert migrations.current_revision(empty_engine) == migrations.head_revision()
    assert _tables(empty_engine) >= TABLES
    assert migrations.check(empty_engine) is None

    migrations.downgrade(empty_engine, "base")
    assert migrations.current_revision(empty_engine) is None
    assert _tables(empty_engine) == set()

    migrations.upgrade(empty_engine)
    migrations.ensure_at_head(empty_engine)
    assert migrations.check(empty_engine) is None


def test_check_reports_drift(empty_engine):
    migrations.upgrade(empty_engine)
    with empty_engine.begin() as conn:
        conn.execute(sa.text("CREATE INDEX ix_stray ON memory_facts (source_thread_id)"))
    drift = migrations.check(empty_engine)
    assert drift is not None and "ix_stray" in drift


def test_the_schema_has_the_indexes_reporting_and_injection_need(empty_engine):
    migrations.upgrade(empty_engine)
    inspector = sa.inspect(empty_engine)
    indexes = {ix["name"]: ix["column_names"] for ix in inspector.get_indexes("memory_facts")}
    assert indexes["ix_memory_facts_tenant_category"] == ["tenant_id", "category"]
    assert indexes["ix_memory_facts_tenant_valid_to"] == ["tenant_id", "valid_to"]
    # No index that no statement reads (revisions 0019 and 0020): each cost every add an entry.
    assert set(indexes) - {"ix_memory_facts_search"} == {
        "ix_memory_facts_tenant_category",
        "ix_memory_facts_tenant_valid_to",
        "uq_memory_facts_live_content_key",
    }
    # Unique among live facts (revision 0015): a partial unique index, no constraint.
    assert inspector.get_unique_constraints("memory_facts") == []
    live = next(ix for ix in inspector.get_indexes("memory_facts") if ix["name"].startswith("uq_"))
    assert live["unique"] and live["column_names"] == [
        "tenant_id",
        "user_id",
        "agent_name",
        "content_key",
    ]
    for table in TABLES:
        pk = inspector.get_pk_constraint(table)["constrained_columns"]
        assert pk[:2] == ["tenant_id", "user_id"], (table, pk)
        for column in inspector.get_columns(table):
            assert "JSON" not in str(column["type"]).upper(), (table, column)


def test_migrations_form_one_line_named_by_revision():
    script = ScriptDirectory.from_config(migrations.alembic_config())
    revisions = list(script.walk_revisions())
    assert len(script.get_heads()) == 1
    assert revisions[-1].down_revision is None
    assert all(Path(r.path).name.startswith(f"{r.revision}_") for r in revisions)


def test_0009_and_0010_go_up_and_down(empty_engine):
    postgres = empty_engine.dialect.name == "postgresql"

    def secured() -> dict[str, tuple[bool, bool]]:
        if not postgres:
            return {}
        with empty_engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
                    "WHERE relname = ANY(:names)"
                ),
                {"names": sorted(TABLES)},
            )
            return {name: (enabled, forced) for name, enabled, forced in rows}

    def invoker_views() -> set[str]:
        with empty_engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT relname FROM pg_class WHERE relkind = 'v' AND relname LIKE 'memory_%' "
                    "AND 'security_invoker=true' = ANY(coalesce(reloptions, '{}'))"
                )
            )
            return {name for (name,) in rows}

    migrations.upgrade(empty_engine, "0008")
    assert "memory_api_keys" not in _tables(empty_engine)
    migrations.upgrade(empty_engine)
    assert "memory_api_keys" in _tables(empty_engine)
    if postgres:
        assert secured() == dict.fromkeys(TABLES, (True, True))
        assert invoker_views() == set(VIEW_NAMES)  # every reporting view, at the head
    migrations.downgrade(empty_engine, "0009")
    if postgres:
        assert secured() == dict.fromkeys(TABLES, (False, False))
        assert invoker_views() == set()
    migrations.downgrade(empty_engine, "0008")
    assert "memory_api_keys" not in _tables(empty_engine)
    migrations.upgrade(empty_engine)
    assert migrations.check(empty_engine) is None
