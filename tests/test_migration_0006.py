"""Revision 0006: stored fact keys recomputed without invisible characters, duplicates merged."""

from __future__ import annotations

import datetime as dt
import hashlib
import unicodedata
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from conftest import assert_no_checked_out_connections

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.schema import memory_fact_events, memory_facts, memory_scopes

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
MERGED = {"tenant_id": "default", "user_id": "user-a", "agent_name": "coder"}
OTHER = {"tenant_id": "default", "user_id": "user-b", "agent_name": "coder"}
FILLER = {"tenant_id": "default", "user_id": "user-0", "agent_name": ""}

# fact_id: (content, confidence, created_at offset in seconds)
MERGED_FACTS = {
    "a1": ("prefers Python", 0.6, 0),
    "a2": ("prefers Py\u200bthon", 0.9, 1),  # kept: the highest confidence, the earliest
    "a3": ("pre\u00adfers python", 0.9, 2),
    "a4": ("\ufeffPrefers python", 0.3, 3),
    "a5": ("likes tea", 0.5, 4),  # unique, key unchanged
    "a6": ("uses vi\u200bm", 0.4, 5),  # unique, key rewritten
    "x1": ("uses go", 0.7, 6),  # kept: same confidence and time as x2, the smaller id
    "x2": ("Uses\u2060 Go", 0.7, 6),
}
KEPT = {"a2": "prefers python", "a5": "likes tea", "a6": "uses vim", "x1": "uses go"}
OTHER_FACTS = {"b1": ("prefers Python", 0.5, 0), "b2": ("likes tea", 0.5, 1)}


def _old_key(content: str) -> str:
    """The fact key of revision 0005 (invisible characters kept)."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", content).casefold())
    return " ".join(folded.split())


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _batch_size() -> int:
    script = ScriptDirectory.from_config(migrations.alembic_config())
    revision = script.get_revision("0006")
    assert revision is not None
    return revision.module.BATCH_SIZE


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'at-0005.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    engine = create_engine(url)
    migrations.upgrade(engine, "0005")
    yield engine
    assert_no_checked_out_connections(engine)
    engine.dispose()


def _insert_scope(
    conn: sa.Connection, scope: dict, version: int, facts: dict, key: Any = None
) -> None:
    conn.execute(
        sa.insert(memory_scopes).values(**scope, version=version, created_at=T0, updated_at=T0)
    )
    rows = [
        {
            **scope,
            "fact_id": fact_id,
            "content": content,
            "content_key": (key or {}).get(fact_id) or _sha(_old_key(content)),
            "category": "preference",
            "confidence": confidence,
            "created_at": T0 + dt.timedelta(seconds=offset),
            "updated_at": T0 + dt.timedelta(seconds=offset),
        }
        for fact_id, (content, confidence, offset) in facts.items()
    ]
    conn.execute(sa.insert(memory_facts), rows)


def _where(table: sa.Table, scope: dict) -> Any:
    return sa.and_(*(table.c[name] == value for name, value in scope.items()))


def _keys(conn: sa.Connection, scope: dict) -> dict[str, str]:
    query = sa.select(memory_facts.c.fact_id, memory_facts.c.content_key)
    return dict(conn.execute(query.where(_where(memory_facts, scope))).all())


def _head(conn: sa.Connection, scope: dict) -> tuple[int, dt.datetime]:
    query = sa.select(memory_scopes.c.version, memory_scopes.c.updated_at)
    row = conn.execute(query.where(_where(memory_scopes, scope))).one()
    return row.version, row.updated_at


def _events(conn: sa.Connection) -> list[tuple]:
    query = sa.select(
        memory_fact_events.c.user_id,
        memory_fact_events.c.version,
        memory_fact_events.c.fact_id,
        memory_fact_events.c.event,
        memory_fact_events.c.category,
        memory_fact_events.c.confidence,
    ).order_by(memory_fact_events.c.fact_id)
    return [tuple(row) for row in conn.execute(query)]


def test_upgrade_merges_invisible_duplicates_and_downgrade_restores_old_keys(engine):
    # The scope with duplicates straddles two batches: a filler scope sorts before it.
    filler = {f"f{i:05d}": (f"filler fact {i}", 0.5, 0) for i in range(_batch_size() - 2)}
    with engine.begin() as conn:
        _insert_scope(conn, FILLER, 2, filler)
        _insert_scope(conn, MERGED, 3, MERGED_FACTS)
        _insert_scope(conn, OTHER, 5, OTHER_FACTS)
        filler_keys = _keys(conn, FILLER)
        other_keys = _keys(conn, OTHER)

    migrations.upgrade(engine, "0006")
    assert migrations.current_revision(engine) == "0006"
    with engine.connect() as conn:
        assert _keys(conn, MERGED) == {fact_id: _sha(key) for fact_id, key in KEPT.items()}
        contents = dict(
            conn.execute(
                sa.select(memory_facts.c.fact_id, memory_facts.c.content).where(
                    _where(memory_facts, MERGED)
                )
            ).all()
        )
        assert contents == {fact_id: MERGED_FACTS[fact_id][0] for fact_id in KEPT}
        version, updated_at = _head(conn, MERGED)
        assert version == 4
        assert updated_at > T0
        assert _events(conn) == [
            ("user-a", 4, fact_id, "removed", "preference", MERGED_FACTS[fact_id][1])
            for fact_id in ("a1", "a3", "a4", "x2")
        ]
        assert _head(conn, OTHER) == (5, T0)
        assert _keys(conn, OTHER) == other_keys
        assert _head(conn, FILLER) == (2, T0)
        assert _keys(conn, FILLER) == filler_keys
    assert migrations.current_revision(engine) == "0006"  # the head's drift check: below

    migrations.downgrade(engine, "0005")
    assert migrations.current_revision(engine) == "0005"
    with engine.connect() as conn:
        old = {fact_id: _sha(_old_key(MERGED_FACTS[fact_id][0])) for fact_id in KEPT}
        assert _keys(conn, MERGED) == old  # the merged facts stay merged
        assert _keys(conn, MERGED)["a2"] == _sha("prefers py\u200bthon")
        assert _head(conn, MERGED)[0] == 5  # its keys changed again
        assert _head(conn, OTHER) == (5, T0)
        assert _keys(conn, OTHER) == other_keys
        assert len(_events(conn)) == 4

    migrations.upgrade(engine)
    with engine.connect() as conn:
        assert _keys(conn, MERGED) == {fact_id: _sha(key) for fact_id, key in KEPT.items()}
        assert _head(conn, MERGED)[0] == 6
        assert len(_events(conn)) == 4
    assert migrations.check(engine) is None


def test_keys_that_trade_places_go_through_placeholders(engine):
    # Stored keys that another fact's new key equals: the rewrite must not trip the unique key.
    facts = {"p": ("alpha\u200b", 0.5, 0), "q": ("beta\u200b", 0.5, 1)}
    swapped = {"p": _sha("beta"), "q": _sha("alpha")}
    with engine.begin() as conn:
        _insert_scope(conn, MERGED, 1, facts, key=swapped)
    migrations.upgrade(engine, "0006")
    with engine.connect() as conn:
        assert _keys(conn, MERGED) == {"p": _sha("alpha"), "q": _sha("beta")}
        assert _head(conn, MERGED)[0] == 2
        assert _events(conn) == []
    migrations.downgrade(engine, "0005")
    with engine.connect() as conn:
        assert _keys(conn, MERGED) == {"p": _sha("alpha\u200b"), "q": _sha("beta\u200b")}


def test_an_empty_database_upgrades_and_downgrades(engine):
    migrations.upgrade(engine, "0006")
    migrations.downgrade(engine, "0005")
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(memory_facts)).scalar() == 0
