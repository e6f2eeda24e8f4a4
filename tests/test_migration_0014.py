"""Revision 0014 on both databases: the ``length`` outcome is accepted, refused reply parts have a
table and a view over it, the usage view still works, and the downgrade removes what it made
(``length`` calls kept as ``invalid_reply``). The revision is tested against its own
``down_revision``, whatever the chain is re-linked to."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from memory_sql import migrations
from memory_sql.database import create_engine

T0 = dt.datetime(2026, 12, 2, 9, 30, tzinfo=dt.timezone.utc)
SCOPE = {"tenant_id": "acme", "user_id": "u1", "agent_name": ""}


def _parent() -> str:
    script = ScriptDirectory(str(migrations.script_location())).get_revision("0014")
    assert script is not None and isinstance(script.down_revision, str)
    return script.down_revision


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'before-0014.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    migrations.upgrade(engine, _parent())
    yield engine
    engine.dispose()


def _call(conn, call_id: str, outcome: str) -> None:
    conn.execute(
        sa.text(
            "INSERT INTO memory_llm_calls (tenant_id, user_id, agent_name, call_id, thread_id, "
            "model, called_at, prompt_tokens, completion_tokens, tokens_counted, latency_ms, "
            "outcome) VALUES ('acme', 'u1', '', :id, 't', 'small', :at, 1500, 4036, false, "
            "900, :outcome)"
        ),
        {"id": call_id, "at": T0, "outcome": outcome},
    )


def _relations(engine) -> set[str]:
    inspector = sa.inspect(engine)
    return set(inspector.get_table_names()) | set(inspector.get_view_names())


def test_upgrade_records_length_and_refusals_and_the_downgrade_undoes_it(engine):
    with engine.begin() as conn:
        _call(conn, "c-old", "ok")
        with pytest.raises(sa.exc.IntegrityError), conn.begin_nested():
            _call(conn, "c-cut", "length")  # not an outcome before 0014
    assert "memory_llm_rejections" not in _relations(engine)

    migrations.upgrade(engine, "0014")
    with engine.begin() as conn:
        _call(conn, "c-cut", "length")
        conn.execute(
            sa.text(
                "INSERT INTO memory_llm_rejections (tenant_id, user_id, agent_name, call_id, "
                "reason, items) VALUES ('acme', 'u1', '', 'c-old', 'placeholder', 2), "
                "('acme', 'u1', '', 'c-cut', 'placeholder', 1), "
                "('acme', 'u1', '', 'c-cut', 'empty', 1)"
            )
        )
        with pytest.raises(sa.exc.IntegrityError), conn.begin_nested():
            conn.execute(
                sa.text(
                    "INSERT INTO memory_llm_rejections VALUES ('acme', 'u1', '', 'c-x', 'empty', 0)"
                )
            )
        refused = conn.execute(
            sa.text(
                "SELECT reason, calls, items FROM memory_report_llm_rejections "
                "WHERE tenant_id = 'acme' ORDER BY reason"
            )
        ).all()
        usage = conn.execute(
            sa.text("SELECT calls, failures FROM memory_report_llm_usage WHERE tenant_id = 'acme'")
        ).one()
    assert [tuple(row) for row in refused] == [("empty", 1, 1), ("placeholder", 2, 3)]
    assert tuple(usage) == (2, 1)
    assert migrations.check(engine) is None if migrations.head_revision() == "0014" else True

    migrations.downgrade(engine, _parent())
    assert not {"memory_llm_rejections", "memory_report_llm_rejections"} & _relations(engine)
    with engine.begin() as conn:
        outcomes = dict(
            conn.execute(sa.text("SELECT call_id, outcome FROM memory_llm_calls")).all()
        )
        usage = conn.execute(sa.text("SELECT calls FROM memory_report_llm_usage")).scalar_one()
    assert outcomes == {"c-old": "ok", "c-cut": "invalid_reply"}
    assert usage == 2
    migrations.upgrade(engine, "0014")  # and up again
    assert "memory_llm_rejections" in _relations(engine)
