"""Revision 0012 on both databases: the budget's holds table and ``held_over_budget`` in
``memory_report_llm_usage`` come and go with it, the usage already recorded reads the same on
either side, and on PostgreSQL the table has row-level security and the view made anew stays
``security_invoker``."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.schema import memory_llm_calls, metadata

DAY = dt.datetime(2026, 11, 3, 12, tzinfo=dt.timezone.utc)


def _revision() -> tuple[str, str]:
    """This revision and the one it follows, as the script says (not the head, nor "0011")."""
    script = ScriptDirectory.from_config(migrations.alembic_config()).get_revision("0012")
    return script.revision, script.down_revision  # type: ignore[return-value]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'before-0012.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    migrations.upgrade(engine, _revision()[1])
    yield engine
    engine.dispose()


def _usage(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM memory_report_llm_usage ORDER BY tenant_id"))
        return [dict(row._mapping) for row in rows]


def _secured(engine: sa.Engine, relation: str) -> tuple[bool, bool, bool]:
    """Row security enabled and forced (a table), security_invoker (a view)."""
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT relrowsecurity, relforcerowsecurity, "
                "'security_invoker=true' = ANY(coalesce(reloptions, '{}')) "
                "FROM pg_class WHERE relname = :name"
            ),
            {"name": relation},
        ).one()


def test_the_holds_table_and_column_come_and_go_with_the_usage_unchanged(engine):
    revision, down = _revision()
    with engine.begin() as conn:
        conn.execute(
            memory_llm_calls.insert(),
            [
                {
                    "tenant_id": tenant,
                    "user_id": "u",
                    "agent_name": "",
                    "call_id": f"c{tenant}",
                    "thread_id": "t",
                    "model": "m",
                    "called_at": DAY,
                    "prompt_tokens": 10,
                    "completion_tokens": 2,
                    "tokens_counted": False,
                    "latency_ms": 5,
                    "outcome": "ok",
                }
                for tenant in ("acme", "zeta")
            ],
        )
    before = _usage(engine)
    migrations.upgrade(engine, revision)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO memory_llm_budget_holds "
                "(tenant_id, day, holds, last_held_at, last_reason) "
                "VALUES ('acme', :day, 3, :at, 'over budget')"
            ),
            {"day": DAY.date(), "at": DAY},
        )
    after = _usage(engine)
    assert [row.pop("held_over_budget") for row in after] == [3, 0]
    assert after == before  # every other column reads as before
    if engine.dialect.name == "postgresql":
        assert _secured(engine, "memory_llm_budget_holds")[:2] == (True, True)
        assert _secured(engine, "memory_report_llm_usage")[2] is True
    migrations.downgrade(engine, down)
    assert "memory_llm_budget_holds" not in sa.inspect(engine).get_table_names()
    assert _usage(engine) == before
    if engine.dialect.name == "postgresql":
        assert _secured(engine, "memory_report_llm_usage")[2] is True


@pytest.mark.postgres
def test_every_table_holding_tenants_rows_has_forced_row_security(new_pg_database):
    engine = create_engine(new_pg_database())
    try:
        migrations.upgrade(engine)
        tables = sorted(
            name
            for name, table in metadata.tables.items()
            if "tenant_id" in table.c and name != "memory_api_keys"
        )
        secured = {name: _secured(engine, name)[:2] for name in tables}
    finally:
        engine.dispose()
    assert "memory_llm_budget_holds" in secured
    assert secured == dict.fromkeys(tables, (True, True))
