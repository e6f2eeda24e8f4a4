"""The storage contract's edges: the error translator (constraints known by name on both
databases), the capabilities a backend lacks (a named error), and the dialect module as the one
place a database is told apart."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

import memory_sql
from memory_sql import Fact, open_storage
from memory_sql.driver_errors import database_errors, is_integrity_error, violated_constraint
from memory_sql.errors import CapabilityMissingError, StorageError
from memory_sql.models import fact_digest
from memory_sql.schema import UTCDateTime, memory_facts, memory_scopes
from memory_sql.storage.capabilities import SQL_CAPABILITIES, Capability, has, require
from memory_sql.storage.dialects import dialect_of

PACKAGE = Path(memory_sql.__file__).parent


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sql_store(request, tmp_path):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    store = open_storage(url)
    yield store
    store.close()


def _row(user: str, fact_id: str, content: str) -> dict:
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "tenant_id": "default",
        "user_id": user,
        "agent_name": "",
        "fact_id": fact_id,
        "content": content,
        "content_key": fact_digest(content),
        "category": "context",
        "confidence": 0.5,
        "created_at": now,
        "updated_at": now,
    }


def _violation(store, row: dict) -> BaseException:
    with pytest.raises(sa.exc.IntegrityError) as raised, store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(row))
    return raised.value


def test_the_translator_names_a_repeated_fact_id_by_its_primary_key(sql_store, request):
    user = f"pk-{request.node.callspec.id}-{id(sql_store)}"
    doc = sql_store.load(user_id=user)
    doc.facts = [Fact(id="f-1", content="Likes tea")]
    sql_store.save(doc, user_id=user)
    error = _violation(sql_store, _row(user, "f-1", "Something else entirely"))
    assert is_integrity_error(error)
    assert violated_constraint(error) == "pk_memory_facts"


def test_the_translator_names_a_casefold_duplicate_by_its_unique_index(sql_store, request):
    user = f"uq-{request.node.callspec.id}-{id(sql_store)}"
    doc = sql_store.load(user_id=user)
    doc.facts = [Fact(content="Prefers Python")]
    sql_store.save(doc, user_id=user)
    error = _violation(sql_store, _row(user, "raw-2", "PREFERS PYTHON"))
    assert violated_constraint(error) == "uq_memory_facts_live_content_key"


def test_the_translator_names_a_failed_check(sql_store, request):
    user = f"ck-{request.node.callspec.id}-{id(sql_store)}"
    doc = sql_store.load(user_id=user)
    doc.facts = [Fact(content="anything")]
    sql_store.save(doc, user_id=user)
    error = _violation(sql_store, _row(user, "raw-3", "other") | {"confidence": 1.5})
    assert violated_constraint(error) == "ck_memory_facts_confidence_range"


def test_sqlite_messages_map_to_the_schema_names():
    unique = "UNIQUE constraint failed: memory_scopes.tenant_id, memory_scopes.user_id, "
    unique += "memory_scopes.agent_name"
    assert violated_constraint(sqlite3.IntegrityError(unique)) == str(
        memory_scopes.primary_key.name
    )
    named = sqlite3.IntegrityError("UNIQUE constraint failed: index 'uq_some_index'")
    assert violated_constraint(named) == "uq_some_index"
    assert violated_constraint(sqlite3.IntegrityError("UNIQUE constraint failed: nope.x")) is None
    assert violated_constraint(ValueError("UNIQUE constraint failed: memory_facts.fact_id")) is None


def test_database_errors_says_what_failed(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with (
        pytest.raises(StorageError, match="reading things: database .*cannot open"),
        database_errors(engine, "reading things"),
        engine.connect(),
    ):
        pass


def test_a_sql_storage_has_every_capability(sql_store):
    assert sql_store.capabilities == SQL_CAPABILITIES
    assert require(sql_store, Capability.QUEUE) is sql_store.engine


def test_the_file_storage_names_each_capability_it_lacks(tmp_path):
    store = open_storage(str(tmp_path / "files"))
    for capability in Capability:
        assert not has(store, capability)
        with pytest.raises(CapabilityMissingError, match=capability.value) as raised:
            require(store, capability, needed_by="a test")
        assert raised.value.capability == capability.value
        assert raised.value.storage == "FileStorage"
        assert "a test needs" in str(raised.value)


def test_the_file_storage_refuses_a_save_in_the_callers_transaction(tmp_path):
    store = open_storage(str(tmp_path / "files"))
    doc = store.load(user_id="u")
    doc.facts = [Fact(content="kept?")]
    with pytest.raises(CapabilityMissingError, match="transactional_save"):
        store.save(doc, user_id="u", in_transaction=lambda conn: None)
    assert store.load(user_id="u").facts == []  # nothing stored
    with pytest.raises(CapabilityMissingError, match="history"):
        store.load(user_id="u", as_of=dt.datetime.now(dt.timezone.utc))


def test_the_sql_storage_runs_the_callers_writes_in_the_save(sql_store, request):
    user = f"tx-{request.node.callspec.id}-{id(sql_store)}"
    doc = sql_store.load(user_id=user)
    doc.facts = [Fact(content="with the caller")]
    seen = []
    sql_store.save(
        doc, user_id=user, in_transaction=lambda conn: seen.append(conn.in_transaction())
    )
    assert seen == [True]


def test_dialects_know_both_databases(sqlite_url):
    engine = sa.create_engine(sqlite_url)
    sqlite = dialect_of(engine)
    assert (sqlite.name, sqlite.server, sqlite.row_security) == ("sqlite", False, False)
    assert sqlite.write_options == {"sqlite_begin": "IMMEDIATE"}
    postgres = dialect_of("postgresql")
    assert postgres.server and postgres.row_security and postgres.locks_rows()
    query = sa.select(memory_scopes)
    assert "SKIP LOCKED" in str(
        postgres.lock_rows(query, skip_locked=True).compile(
            dialect=sa.dialects.postgresql.dialect()
        )
    )
    assert "FOR UPDATE" not in str(sqlite.lock_rows(query))
    with pytest.raises(ValueError, match="unsupported database 'oracle'"):
        dialect_of("oracle")
    engine.dispose()


def test_no_module_outside_the_dialects_tells_the_databases_apart_by_name():
    allowed = {"storage/dialects.py", "migrations.py"}
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in allowed
        and re.search(r"dialect\.name\b", path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_no_module_outside_the_dialects_tells_urls_apart_by_backend_name():
    """A URL's backend is read by the dialect module (``dialect_of(url)``, ``database_file``),
    the engine factory (``database.py``: the drivers it accepts, each one's connection setup)
    and the error translator (a file named by its path in messages: ground, below storage)."""
    allowed = {"storage/dialects.py", "migrations.py", "database.py", "driver_errors.py"}
    pattern = re.compile(r"get_backend_name\(\)|\.drivername\b")
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in allowed
        and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_no_raw_driver_error_is_caught_outside_the_translator():
    pattern = re.compile(
        r"except[^:\n]*\b(psycopg\.\w*Error|sqlite3\.\w*Error|sa_exc\.|sqlalchemy\.exc"
        r"|sa\.exc\.(?!ArgumentError))"  # a URL SQLAlchemy cannot parse is no database error
    )
    allowed = {"driver_errors.py", "migrations.py"}
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in allowed
        and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_utc_timestamps_read_back_aware_in_utc_on_both_databases(sql_store):
    """``UTCDateTime`` tells the databases apart by what the driver returns (SQLite: naive UTC
    text; PostgreSQL: an aware datetime), not by name: both read back the same UTC moment."""
    zoned = dt.datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    naive = dt.datetime(2024, 5, 1, 12, 0, 0, 123456)  # naive: UTC, never the local time
    expected = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
    with sql_store.engine.connect() as conn:
        for value in (zoned, naive, expected):
            back = conn.execute(sa.select(sa.literal(value, UTCDateTime()))).scalar_one()
            assert back == expected and back.tzinfo is dt.timezone.utc
        stored = conn.execute(
            sa.select(sa.cast(sa.literal(zoned, UTCDateTime()), sa.String))
        ).scalar_one()
    assert stored.startswith("2024-05-01 12:00:00.123456")  # the UTC moment, as text


def test_driver_errors_are_caught_wholesale_only_where_a_driver_is_used_directly():
    """Elsewhere a database error is a ``StorageError`` (:func:`database_errors`), or asked
    about: ``is_refusal(exc, name)``, ``is_unavailable(exc)``, ``is_disconnect(exc)``."""
    allowed = {
        "driver_errors.py": "the translator itself",
        "storage/wakeups.py": "the listener and the poller hold driver connections of their "
        "own, outside any engine: any driver error there means reconnect",
    }
    pattern = re.compile(r"except[^:\n]*\b(DRIVER_ERRORS|DATABASE_ERRORS)\b")
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in allowed
        and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
