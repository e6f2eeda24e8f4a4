"""Revision 0016 on both databases: the redaction counters' table accepts counts (and refuses a
zero or an unknown stage), its view sums them per tenant, day and kind, and the downgrade
removes both. Tested against its own ``down_revision``."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.storage.redactions import record_redactions, redaction_totals

DAY = dt.date(2026, 12, 4)


def _parent() -> str:
    script = ScriptDirectory(str(migrations.script_location())).get_revision("0016")
    assert script is not None and isinstance(script.down_revision, str)
    return script.down_revision


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'before-0016.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    migrations.upgrade(engine, _parent())
    yield engine
    engine.dispose()


def _relations(engine) -> set[str]:
    inspector = sa.inspect(engine)
    return set(inspector.get_table_names()) | set(inspector.get_view_names())


def test_upgrade_counts_redactions_and_the_downgrade_removes_them(engine):
    assert "memory_redactions" not in _relations(engine)
    migrations.upgrade(engine, "0016")
    with engine.begin() as conn:
        record_redactions(conn, "acme", "intake", {"jwt": 2, "aws-secret": 1}, DAY)
        record_redactions(conn, "acme", "write", {"jwt": 1}, DAY)
        record_redactions(conn, "acme", "intake", {"jwt": 3}, DAY)  # added to the row
        record_redactions(conn, "globex", "scrub", {"card-number": 4}, DAY)
        with pytest.raises(sa.exc.IntegrityError), conn.begin_nested():
            conn.execute(
                sa.text(
                    "INSERT INTO memory_redactions VALUES ('acme', :day, 'jwt', 'elsewhere', 1)"
                ),
                {"day": DAY},
            )
        with pytest.raises(sa.exc.IntegrityError), conn.begin_nested():
            conn.execute(
                sa.text("INSERT INTO memory_redactions VALUES ('acme', :day, 'x', 'write', 0)"),
                {"day": DAY},
            )
        rows = conn.execute(
            sa.text(
                "SELECT tenant_id, kind, redactions, at_intake, at_write, by_scrub "
                "FROM memory_report_redactions ORDER BY tenant_id, kind"
            )
        ).all()
        totals = redaction_totals(conn, "acme")
    assert [tuple(row) for row in rows] == [
        ("acme", "aws-secret", 1, 1, 0, 0),
        ("acme", "jwt", 6, 5, 1, 0),
        ("globex", "card-number", 4, 0, 0, 4),
    ]
    assert totals == {("acme", "aws-secret"): 1, ("acme", "jwt"): 6}
    with pytest.raises(ValueError, match="stage"), engine.begin() as conn:
        record_redactions(conn, "acme", "elsewhere", {"jwt": 1})

    migrations.downgrade(engine, _parent())
    assert not {"memory_redactions", "memory_report_redactions"} & _relations(engine)
    migrations.upgrade(engine, "0016")  # and up again
    assert "memory_report_redactions" in _relations(engine)
