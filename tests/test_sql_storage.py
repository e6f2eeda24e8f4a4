"""What only the SQL store promises: constraints in the database itself, the version-checked
cache, the schema check at open, and clean errors when the database is down."""

from __future__ import annotations

import datetime as dt
import gc
import os
import re
import threading
import time
import weakref
from contextlib import ExitStack

import pytest
import sqlalchemy as sa
from conftest import assert_no_checked_out_connections
from pg_sessions import wait_until_session_ends
from sqlalchemy import event

from memory_sql import (
    DuplicateFactError,
    Fact,
    MemoryDocument,
    SchemaOutOfDateError,
    StorageError,
    VersionConflictError,
    migrations,
)
from memory_sql.database import create_engine
from memory_sql.models import Section, fact_digest
from memory_sql.schema import memory_fact_events, memory_facts, memory_scopes
from memory_sql.storage import SQLStorage, open_storage
from memory_sql.storage.dialects import dialect_of
from memory_sql.storage.driver import DriverConnection, release_idle


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def sql_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def store(sql_url):
    storage = open_storage(sql_url)
    assert isinstance(storage, SQLStorage)
    yield storage
    assert_no_checked_out_connections(storage.engine)
    storage.close()


class Statements:
    """Counts the SQL statements an engine runs."""

    def __init__(self, engine: sa.Engine) -> None:
        self.seen: list[str] = []
        event.listen(engine, "before_cursor_execute", self._record)
        self.engine = engine

    def _record(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.seen.append(statement)

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)


def _raw_fact(scope: dict, fact_id: str, content: str) -> dict:
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "tenant_id": "default",
        "user_id": scope["user_id"],
        "agent_name": scope["agent_name"],
        "fact_id": fact_id,
        "content": content,
        "content_key": fact_digest(content),
        "category": "context",
        "confidence": 0.5,
        "created_at": now,
        "updated_at": now,
    }


@pytest.mark.parametrize(
    ("first", "second"), [("Straße", "STRASSE"), ("Prefers Python", "PREFERS PYTHON")]
)
def test_the_database_itself_refuses_casefold_duplicates(store, scope, first, second):
    doc = store.load(**scope)
    doc.facts = [Fact(content=first)]
    store.save(doc, **scope)
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(_raw_fact(scope, "raw-1", second)))
    assert [f.content for f in store.load(**scope).facts] == [first]


def test_the_database_refuses_confidence_out_of_range(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content="anything")]
    store.save(doc, **scope)
    row = _raw_fact(scope, "raw-2", "other") | {"confidence": 1.5}
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(row))


def test_facts_cannot_exist_without_their_scope(store, scope):
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(_raw_fact(scope, "orphan", "orphan fact")))


def test_a_10kb_fact_fits_the_unique_index(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content="é" * 12_000), Fact(content="É" * 12_000 + " ")]
    with pytest.raises(Exception) as caught:
        store.save(doc, **scope)
    assert type(caught.value).__name__ == "DuplicateFactError"
    doc.facts.pop()
    store.save(doc, **scope)
    assert len(store.load(**scope).facts[0].content) == 12_000


def test_an_unchanged_memory_costs_one_primary_key_read(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content=f"fact {i}") for i in range(20)]
    store.save(doc, **scope)
    counter = Statements(store.engine)
    try:
        loaded = store.load(**scope)
    finally:
        counter.close()
    assert len(loaded.facts) == 20
    selects = [s for s in counter.seen if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1, counter.seen
    assert "memory_scopes" in selects[0] and "memory_facts" not in selects[0]


class DriverStatements:
    """Counts the SQL statements the driver itself runs on an engine's pooled connections
    (those memory_sql sends past SQLAlchemy included): sqlite3's trace callback, a recording
    psycopg cursor."""

    def __init__(self, engine: sa.Engine) -> None:
        self.seen: list[str] = []
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        self._after_nested = False
        # Connections the driver's path keeps between calls are closed, so that every
        # statement counted runs on a connection checked out after this point.
        release_idle(engine)
        event.listen(engine, "checkout", self._watch)
        event.listen(engine, "checkin", self._unwatch)

    def _watch(self, dbapi_connection, record, proxy) -> None:
        if self.sqlite:
            dbapi_connection.set_trace_callback(self._sqlite_statement)
            return
        import psycopg

        seen = self.seen

        class Recording(psycopg.Cursor):
            def execute(self, query, params=None, **kwargs):
                seen.append(str(query))
                return super().execute(query, params, **kwargs)

        dbapi_connection.cursor_factory = Recording

    def _unwatch(self, dbapi_connection, record) -> None:
        if dbapi_connection is None:
            return
        if self.sqlite:
            dbapi_connection.set_trace_callback(None)
        else:
            import psycopg

            dbapi_connection.cursor_factory = psycopg.Cursor

    def close(self) -> None:
        event.remove(self.engine, "checkout", self._watch)
        event.remove(self.engine, "checkin", self._unwatch)
        release_idle(self.engine)  # kept ones were watched, and would stay so

    def _sqlite_statement(self, statement: str) -> None:
        # What the FTS5 index runs itself (its triggers' statements, "-- "-prefixed, and its
        # checks of the file's version) is not the driver's; after such a nested statement
        # sqlite3 traces the outer one a second time.
        nested = statement.startswith("-- ") or "memory_facts_fts" in statement
        if nested or statement == "PRAGMA 'main'.data_version":
            self._after_nested = True
            return
        if self._after_nested and self.seen and self.seen[-1] == statement:
            self._after_nested = False
            return
        self._after_nested = False
        self.seen.append(statement)

    def of_memory(self) -> list[str]:
        return [s for s in self.seen if "memory_" in s]


def test_a_cached_load_by_the_driver_is_one_primary_key_read(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content=f"fact {i}") for i in range(20)]
    store.save(doc, **scope)
    store.load(**scope)
    counter = DriverStatements(store.engine)
    try:
        loaded = store.load(**scope)
    finally:
        counter.close()
    assert len(loaded.facts) == 20
    (statement,) = counter.of_memory()
    assert "memory_scopes" in statement and "memory_facts" not in statement
    assert not [s for s in counter.seen if s.split()[0].upper() in ("BEGIN", "ROLLBACK")]


def test_a_save_by_the_driver_is_one_statement_or_one_short_transaction(store, scope):
    """PostgreSQL: one statement. SQLite: one transaction of the claim and the rows written,
    nothing read in it; both as a fresh store reads them back."""
    store.save(MemoryDocument(facts=[Fact(content=f"fact {i}") for i in range(20)]), **scope)
    doc = store.load(**scope)
    doc.facts[3] = doc.facts[3].replace(confidence=0.25)
    counter = DriverStatements(store.engine)
    try:
        assert store.save(doc, **scope) == 2
    finally:
        counter.close()
    if store.engine.dialect.name == "postgresql":
        (statement,) = counter.of_memory()
        assert statement.lstrip().upper().startswith("WITH")
    else:
        verbs = [" ".join(s.split()[:2]) for s in counter.seen]
        expected = ["BEGIN IMMEDIATE", "UPDATE memory_scopes", "UPDATE memory_facts"]
        assert verbs == [*expected, "INSERT INTO", "COMMIT"], counter.seen
        assert "memory_fact_events" in counter.seen[3]
    with open_storage(str(store.engine.url.render_as_string(hide_password=False))) as other:
        (changed,) = [f for f in other.load(**scope).facts if f.confidence == 0.25]
    assert changed.id == doc.facts[3].id and changed.updated_at is not None
    assert changed == store.load(**scope).facts[3]


def test_sqlite_saves_by_the_driver_store_timestamps_as_sqlalchemy_does(sqlite_url, scope):
    """The driver's SQLite save binds times as SQLAlchemy's does (naive UTC text, always with
    microseconds: sqlite3's own adapter drops ".000000"): the rows it writes and those
    SQLAlchemy's path writes read alike, in SQL too (the reports compare them as text)."""
    with SQLStorage(sqlite_url) as store:
        when = dt.datetime(2024, 5, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
        store.save(MemoryDocument(facts=[Fact(content="first", created_at=when)]), **scope)
        doc = store.load(**scope)
        doc.facts.append(Fact(content="by the driver", created_at=when))
        store.save(doc, **scope)  # the driver's path: the stored document is in the cache
        doc = store.load(**scope)
        doc.facts.append(Fact(content="by sqlalchemy", created_at=when))
        with store.engine.begin() as conn:  # in_transaction: SQLAlchemy's path
            store.save(doc, **scope, in_transaction=lambda c: None)
            conn.rollback()
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT content, created_at, updated_at FROM memory_facts WHERE user_id = ?",
                (scope["user_id"],),
            ).all()
    texts = {content: (created, updated) for content, created, updated in rows}
    assert texts["by the driver"][0] == texts["by sqlalchemy"][0] == "2024-05-01 12:00:00.000000"
    for _, updated in texts.values():
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}", updated), updated


def test_a_refused_sqlite_save_leaves_no_lock_behind(sqlite_url, scope):
    """A save the database refuses mid-transaction (a casefold duplicate) rolls back on the
    driver's connection: nothing is stored, and another connection writes at once."""
    with SQLStorage(sqlite_url) as store, SQLStorage(sqlite_url) as other:
        store.save(MemoryDocument(facts=[Fact(content="Likes tea")]), **scope)
        doc = store.load(**scope)
        doc.facts.append(Fact(content="likes TEA"))
        doc.facts.append(Fact(content="not stored either"))
        with pytest.raises(DuplicateFactError):
            store.save(doc, **scope)
        started = time.monotonic()
        elsewhere = other.load(**scope)
        elsewhere.facts.append(Fact(content="written at once"))
        assert other.save(elsewhere, **scope) == 2
        assert time.monotonic() - started < 2  # no lock left: a writer waits up to 30 s
        assert [f.content for f in store.load(**scope).facts] == ["Likes tea", "written at once"]


def test_sqlalchemy_transactions_stay_transactions_after_driver_calls(store, scope):
    """The driver's path gives back to the pool, in autocommit, the connections it has no
    room to keep; SQLAlchemy's own connections (the same pooled ones) still get transactions
    that roll back."""
    store.save(MemoryDocument(facts=[Fact(content="kept")]), **scope)
    release_idle(store.engine)
    store.engine.pool.dispose()  # any pooled connection will do, below: use them all
    calls = store.engine.pool.size() + 2  # more driver calls at once than it keeps connections
    for _ in range(2):  # the first round fills the kept ones; the second gives two back
        with ExitStack() as stack:
            used = [stack.enter_context(DriverConnection(store.engine)) for _ in range(calls)]
    with ExitStack() as held:  # every pooled connection, those given back among them
        conns = [held.enter_context(store.engine.connect()) for _ in range(calls)]
        reused = [c for c in conns if c.connection.driver_connection in used]
        assert reused
        for conn in reused:
            if store.engine.dialect.name == "postgresql":
                assert conn.connection.driver_connection.autocommit is False
            with conn.begin() as tx:
                conn.execute(sa.update(memory_scopes).values(version=memory_scopes.c.version + 7))
                tx.rollback()
    with store.engine.connect() as conn:
        versions = conn.execute(
            sa.select(memory_scopes.c.version).where(memory_scopes.c.user_id == scope["user_id"])
        ).scalars()
        assert list(versions) == [1]
    assert store.load(**scope).version == 1


def test_a_driver_read_that_fails_is_done_again_by_sqlalchemy(store, scope):
    store.save(MemoryDocument(facts=[Fact(content="kept")]), **scope)
    store.load(**scope)
    store._head_sql = ("SELECT no_such_column FROM memory_scopes", {})
    store._document_sql = ("SELECT no_such_column FROM memory_facts", {})
    assert [f.content for f in store.load(**scope).facts] == ["kept"]
    store._cache.clear()
    assert [f.content for f in store.load(**scope).facts] == ["kept"]


@pytest.mark.postgres
def test_a_session_in_another_time_zone_still_loads_utc(pg_url, scope):
    engine = create_engine(pg_url)  # its sessions are UTC: this one's are not

    @event.listens_for(engine, "connect")
    def _tokyo(dbapi_connection, _record) -> None:
        dbapi_connection.autocommit = True
        dbapi_connection.execute("SET TimeZone = 'Asia/Tokyo'")
        dbapi_connection.autocommit = False

    try:
        with SQLStorage(engine) as store:
            with store.engine.connect() as conn:
                zone = conn.exec_driver_sql("SHOW TimeZone").scalar()
            assert zone == "Asia/Tokyo"
            saved = Fact(content="zoned", created_at=dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC))
            store.save(MemoryDocument(facts=[saved]), **scope)
            store._cache.clear()
            for _ in range(2):  # cold, then from the cache after its version check
                (fact,) = store.load(**scope).facts
                assert fact.created_at == saved.created_at
                assert fact.created_at.tzinfo is dt.timezone.utc
                assert fact.updated_at.tzinfo is dt.timezone.utc
            assert len(store._cache) == 1
    finally:
        engine.dispose()


def test_sqlite_timestamps_written_by_other_tools_load_as_utc(sqlite_url, scope):
    with open_storage(sqlite_url) as store:
        store.save(MemoryDocument(facts=[Fact(content="ours")]), **scope)
        row = _raw_fact(scope, "theirs", "written by another tool")
        with store.engine.begin() as conn:
            conn.execute(sa.insert(memory_facts).values(row))
            conn.execute(
                sa.text(
                    "UPDATE memory_facts SET created_at = '2024-05-01T14:00:00+02:00',"
                    " updated_at = '2024-05-02T09:30:00Z' WHERE fact_id = 'theirs'"
                )
            )
        store._cache.clear()
        facts = {f.id: f for f in store.load(**scope).facts}
    theirs = facts["theirs"]
    assert theirs.created_at == dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)
    assert theirs.updated_at == dt.datetime(2024, 5, 2, 9, 30, tzinfo=dt.timezone.utc)
    assert theirs.created_at.tzinfo is theirs.updated_at.tzinfo is dt.timezone.utc
    assert list(facts)[0] == "theirs"  # the oldest first


def _row_versions(store, scope) -> dict[str, str]:
    """PostgreSQL's xmin of the scope's rows: it changes when a row is written."""
    params = {"user": scope["user_id"]}
    with store.engine.connect() as conn:
        versions = {
            "scope": conn.execute(
                sa.text("SELECT xmin::text FROM memory_scopes WHERE user_id = :user"), params
            ).scalar_one()
        }
        for content, xmin in conn.execute(
            sa.text("SELECT content, xmin::text FROM memory_facts WHERE user_id = :user"), params
        ):
            versions[f"fact {content}"] = xmin
        for section, xmin in conn.execute(
            sa.text("SELECT section, xmin::text FROM memory_sections WHERE user_id = :user"),
            params,
        ):
            versions[f"section {section}"] = xmin
    return versions


def test_the_cache_sees_writes_from_another_process_store(store, sql_url, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content="original")]
    store.save(doc, **scope)
    assert [f.content for f in store.load(**scope).facts] == ["original"]
    with open_storage(sql_url) as other:
        theirs = other.load(**scope)
        theirs.facts.append(Fact(content="added elsewhere"))
        other.save(theirs, **scope)
    assert sorted(f.content for f in store.load(**scope).facts) == ["added elsewhere", "original"]


def test_a_save_writes_only_the_rows_that_changed(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content=f"fact {i}") for i in range(50)]
    doc.user.work_context = Section(summary="Works at Acme.")
    store.save(doc, **scope)
    doc = store.load(**scope)
    doc.facts.append(Fact(content="one more"))
    postgres = store.engine.dialect.name == "postgresql"
    before = _row_versions(store, scope) if postgres else None
    counter = Statements(store.engine)
    try:
        store.save(doc, **scope)
    finally:
        counter.close()
    if postgres:
        # One statement, one round trip; the rows it left alone keep their row version.
        (statement,) = counter.seen
        assert statement.lstrip().upper().startswith("WITH")
        after = _row_versions(store, scope)
        assert {k for k in after if after[k] != before.get(k)} == {"scope", "fact one more"}
        return
    writes = [
        s for s in counter.seen if s.lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE")
    ]
    assert len(writes) == 3, writes  # the version bump, one fact row, one fact event
    assert any("memory_facts" in s and s.lstrip().upper().startswith("INSERT") for s in writes)
    reads = [
        s for s in counter.seen if "memory_facts" in s and s.lstrip().upper().startswith("SELECT")
    ]
    assert reads == []  # the base came from the cache


def test_a_save_from_a_cold_cache_reads_the_base_in_the_transaction(sql_url, scope):
    with open_storage(sql_url) as writer:
        doc = writer.load(**scope)
        doc.facts = [Fact(content="kept"), Fact(content="dropped")]
        writer.save(doc, **scope)
        doc = writer.load(**scope)
    doc.facts = [f for f in doc.facts if f.content == "kept"] + [Fact(content="new")]
    with open_storage(sql_url) as cold:
        assert cold.save(doc, **scope) == 2
    with open_storage(sql_url) as reader:
        assert sorted(f.content for f in reader.load(**scope).facts) == ["kept", "new"]


def test_opening_a_database_that_is_not_migrated_names_the_fix(tmp_path):
    # A new SQLite file is migrated on first open; one at an older revision is not.
    url = f"sqlite:///{tmp_path / 'older.db'}"
    engine = create_engine(url)
    try:
        migrations.upgrade(engine, "0005")
    finally:
        engine.dispose()
    with pytest.raises(SchemaOutOfDateError, match="memory-sql db upgrade"):
        open_storage(url)


def test_a_database_that_is_down_gives_a_storage_error():
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    with pytest.raises(StorageError, match="127.0.0.1:1"):
        SQLStorage(engine)
    engine.dispose()


def test_a_broken_table_gives_a_storage_error_and_keeps_the_scope(sqlite_url, scope):
    with open_storage(sqlite_url) as store:
        doc = store.load(**scope)
        doc.facts = [Fact(content="before the outage")]
        store.save(doc, **scope)
        with store.engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE memory_facts"))
        with pytest.raises(StorageError, match="memory_facts"):
            store.save(store.load(**scope).model_copy(update={"facts": []}), **scope)
        with store.engine.connect() as conn:
            version = conn.execute(sa.select(memory_scopes.c.version)).scalar()
        assert version == 1


def test_a_scope_deleted_and_made_again_is_not_served_from_the_cache(store, sql_url, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content="old secret")]
    store.save(doc, **scope)
    assert [f.content for f in store.load(**scope).facts] == ["old secret"]
    with store.engine.begin() as conn:  # what forgetting a user does: the rows go
        conn.execute(sa.delete(memory_scopes).where(memory_scopes.c.user_id == scope["user_id"]))
    with open_storage(sql_url) as other:
        other.save(MemoryDocument(facts=[Fact(content="fresh start")]), **scope)
    reloaded = store.load(**scope)
    assert reloaded.version == 1
    assert [f.content for f in reloaded.facts] == ["fresh start"]
    reloaded.facts.append(Fact(content="added later"))
    store.save(reloaded, **scope)
    with open_storage(sql_url) as other:
        assert sorted(f.content for f in other.load(**scope).facts) == [
            "added later",
            "fresh start",
        ]


def test_a_stale_cache_entry_is_never_the_base_of_a_save(store, sql_url, scope):
    store.save(MemoryDocument(facts=[Fact(content="old secret")]), **scope)
    store.load(**scope)
    with store.engine.begin() as conn:
        conn.execute(sa.delete(memory_scopes).where(memory_scopes.c.user_id == scope["user_id"]))
    with open_storage(sql_url) as other:
        other.save(MemoryDocument(facts=[Fact(content="fresh start")]), **scope)
        theirs = other.load(**scope)
    theirs.facts.append(Fact(content="second"))
    store.save(theirs, **scope, expected_version=1)
    with open_storage(sql_url) as reader:
        contents = sorted(f.content for f in reader.load(**scope).facts)
    assert contents == ["fresh start", "second"]


def test_the_cache_holds_at_most_cache_scopes_memories(sql_url):
    with SQLStorage(sql_url, cache_scopes=2) as bounded:
        for n in range(5):
            bounded.save(MemoryDocument(facts=[Fact(content=f"f{n}")]), user_id=f"lru-{n}")
            bounded.load(user_id=f"lru-{n}")
        assert len(bounded._cache) == 2
        assert [f.content for f in bounded.load(user_id="lru-0").facts] == ["f0"]


def test_rows_of_its_own_tables_are_trusted_and_input_is_still_validated(store, scope):
    # A load builds facts from rows without validating them again (every row was a validated
    # Fact when it was written; that is most of a cold load's time otherwise), so a row
    # written by hand around memory_sql comes back as written, and is kept by later saves.
    store.save(MemoryDocument(facts=[Fact(content="fine")]), **scope)
    with store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(_raw_fact(scope, "bad id!", "hand-written")))
        conn.execute(
            sa.update(memory_scopes)
            .where(memory_scopes.c.user_id == scope["user_id"])
            .values(version=memory_scopes.c.version + 1)
        )
    doc = store.load(**scope)
    assert sorted(f.id for f in doc.facts if f.content == "hand-written") == ["bad id!"]
    doc.facts.append(Fact(content="added"))
    store.save(doc, **scope)
    assert {f.content for f in store.load(**scope).facts} == {"fine", "hand-written", "added"}
    with pytest.raises(ValueError, match="fact id"):
        doc.facts[0].replace(id="bad id!")  # every input path still validates


def test_naive_timestamps_are_utc_whatever_the_local_zone(store, scope, monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        store.save(MemoryDocument(facts=[Fact(content="anchor")]), **scope)
        naive = dt.datetime(2026, 1, 1, 12, 0, 0)
        with store.engine.begin() as conn:
            conn.execute(
                sa.update(memory_facts)
                .where(memory_facts.c.user_id == scope["user_id"])
                .values(created_at=naive)
            )
            stored = conn.execute(
                sa.select(memory_facts.c.created_at).where(
                    memory_facts.c.user_id == scope["user_id"]
                )
            ).scalar()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert stored == dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def test_a_database_ahead_of_the_code_says_upgrade_memory_sql(sqlite_url):
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00d'"))
    engine.dispose()
    with pytest.raises(SchemaOutOfDateError, match="upgrade memory_sql"):
        open_storage(sqlite_url)


@pytest.mark.parametrize(
    "url", ["mysql://root@db.internal/memory", "postgresql+asyncpg://u@h/db", "sqlite3:///m.db"]
)
def test_unsupported_urls_are_refused_not_taken_for_folders(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="unsupported database"):
        open_storage(url)
    assert list(tmp_path.iterdir()) == []


def test_sqlite_autocommit_connections_really_commit(sqlite_url, scope):
    engine = create_engine(sqlite_url)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        row = {"tenant_id": "default", "user_id": scope["user_id"], "agent_name": ""}
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(
                sa.insert(memory_scopes).values(**row, version=1, created_at=now, updated_at=now)
            )
        with engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(memory_scopes)).scalar()
        assert count == 1
    finally:
        engine.dispose()


def test_every_save_logs_its_fact_changes(store, scope):
    doc = store.load(**scope)
    doc.facts = [Fact(content="a", category="goal"), Fact(content="b"), Fact(content="c")]
    store.save(doc, **scope)
    doc = store.load(**scope)
    removed = doc.facts.pop(0)
    doc.facts[0] = doc.facts[0].replace(confidence=0.9)
    doc.facts.append(Fact(content="d"))
    doc.user.top_of_mind.summary = "sections are not fact events"
    store.save(doc, **scope)
    with store.engine.connect() as conn:
        events = conn.execute(
            sa.select(
                memory_fact_events.c.version,
                memory_fact_events.c.event,
                memory_fact_events.c.fact_id,
                memory_fact_events.c.category,
            )
            .where(memory_fact_events.c.user_id == scope["user_id"])
            .order_by(memory_fact_events.c.version, memory_fact_events.c.event)
        ).all()
    assert [(v, e) for v, e, _, _ in events] == [
        (1, "added"),
        (1, "added"),
        (1, "added"),
        (2, "added"),
        (2, "removed"),
        (2, "updated"),
    ]
    assert (2, "removed", removed.id, "goal") in events


@pytest.mark.postgres
def test_a_load_survives_the_server_dropping_its_connections(pg_url, scope):
    with open_storage(pg_url) as store:
        store.save(MemoryDocument(facts=[Fact(content="still here")]), **scope)
        store.load(**scope)  # the pool now holds a connection
        admin = create_engine(pg_url)
        with admin.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
        admin.dispose()
        assert killed >= 1
        doc = store.load(**scope)  # on the connection kept idle: found dead, read again
        assert [f.content for f in doc.facts] == ["still here"]
        doc.facts.append(Fact(content="and this"))
        assert store.save(doc, **scope) == 2  # the dead one is gone: no error to the caller
        assert [f.content for f in store.load(**scope).facts] == ["still here", "and this"]


def test_saves_of_one_fact_each_write_its_row_and_its_event(store, scope):
    """One fact added, changed, removed per save (the one-statement save's single-row
    form on PostgreSQL): each row as written, each event logged, a fresh store agrees."""
    doc = store.load(**scope)
    doc.facts = [Fact(content="kept", category="goal", confidence=0.9)]
    store.save(doc, **scope)
    doc = store.load(**scope)
    doc.facts.append(Fact(content="Added", category="behavior", confidence=0.9))
    assert store.save(doc, **scope) == 2
    doc = store.load(**scope)
    doc.facts[1] = doc.facts[1].replace(
        content="Added, reworded", confidence=0.42, source_error="it was wrong"
    )
    assert store.save(doc, **scope) == 3
    doc = store.load(**scope)
    changed = doc.facts[1]
    doc.facts = doc.facts[1:]
    assert store.save(doc, **scope) == 4
    with open_storage(store.engine.url.render_as_string(hide_password=False)) as other:
        (fact,) = other.load(**scope).facts
    assert fact == changed
    assert (fact.content, fact.confidence, fact.source_error) == (
        "Added, reworded",
        0.42,
        "it was wrong",
    )
    assert fact.updated_at is not None and fact.updated_at.tzinfo is dt.timezone.utc
    with store.engine.connect() as conn:
        key = conn.execute(
            sa.select(memory_facts.c.content_key).where(
                memory_facts.c.user_id == scope["user_id"], memory_facts.c.fact_id == fact.id
            )
        ).scalar()
        events = conn.execute(
            sa.select(
                memory_fact_events.c.version,
                memory_fact_events.c.event,
                memory_fact_events.c.category,
                memory_fact_events.c.confidence,
            )
            .where(memory_fact_events.c.user_id == scope["user_id"])
            .order_by(memory_fact_events.c.version)
        ).all()
    assert key == fact_digest("Added, reworded")
    assert [tuple(e) for e in events] == [
        (1, "added", "goal", 0.9),
        (2, "added", "behavior", 0.9),
        (3, "updated", "behavior", 0.42),
        (4, "removed", "goal", 0.9),
    ]
    doc = store.load(**scope)
    doc.facts.append(Fact(content="ADDED, reworded"))
    with pytest.raises(DuplicateFactError):
        store.save(doc, **scope)


# --- the connections the driver's path keeps ----------------------------------------------


def test_a_pool_of_one_connection_is_not_kept_from_sqlalchemy(sql_url, scope):
    """A pool of one keeps nothing aside: SQLAlchemy's own work (SQLite's saves, the version
    check of a conflict) finds the connection at once instead of timing out."""
    engine = create_engine(sql_url, pool_size=1, max_overflow=0, pool_timeout=2)
    try:
        with SQLStorage(engine) as store:
            for content in ("one", "two", "three"):
                doc = store.load(**scope)
                doc.facts.append(Fact(content=content))
                store.save(doc, **scope)
            stale = store.load(**scope)
            store.save(store.load(**scope), **scope)  # unchanged: nothing written
            stale.version -= 1
            with pytest.raises(VersionConflictError):
                store.save(stale.model_copy(update={"facts": []}), **scope)
            assert [f.content for f in store.load(**scope).facts] == ["one", "two", "three"]
    finally:
        engine.dispose()


def test_many_threads_on_a_small_pool_all_get_a_connection(sql_url):
    """16 threads loading and saving through a pool of 2 (no overflow, 2 s to wait): the kept
    connections are outside the pool, so no thread waits on them and none times out; and none is
    made and closed again and again (the pool's 2 and the 2 kept: 4 connections in all)."""
    engine = create_engine(sql_url, pool_size=2, max_overflow=0, pool_timeout=2)
    connects: list[object] = []
    event.listen(engine, "connect", lambda dbapi_connection, _record: connects.append(1))
    errors: list[BaseException] = []
    saves = [0] * 16

    def work(t: int) -> None:
        deadline = time.monotonic() + 2
        try:
            while time.monotonic() < deadline:
                doc = store.load(user_id=f"thread-{t}")
                doc.facts.append(Fact(content=f"fact {saves[t]}"))
                store.save(doc, user_id=f"thread-{t}")
                saves[t] += 1
        except BaseException as exc:
            errors.append(exc)

    try:
        with SQLStorage(engine) as store:
            threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            assert all(saves)
            assert len(connects) <= 4, f"{len(connects)} connections made for {sum(saves)} saves"
            for t in range(16):
                assert len(store.load(user_id=f"thread-{t}").facts) == saves[t]
            assert_no_checked_out_connections(store)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_an_engine_dropped_without_dispose_closes_its_kept_connection(pg_url, scope):
    engine = create_engine(pg_url)
    store = SQLStorage(engine)
    store.save(MemoryDocument(facts=[Fact(content="kept")]), **scope)
    with DriverConnection(engine) as dbapi:
        ((pid,),) = dbapi.execute("SELECT pg_backend_pid()").fetchall()
    collected = weakref.ref(engine)
    del store, engine, dbapi
    gc.collect()
    assert collected() is None
    admin = create_engine(pg_url)
    try:
        wait_until_session_ends(admin, pid, "the connection kept by a collected engine")
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_a_forked_child_leaves_its_parents_kept_connection_alone(pg_url, scope):
    """A child loads on a connection of its own, not on the one its parent keeps (the parent's
    pool holds no other connection at the fork, so the child's engine needs no dispose); the
    parent's kept one still serves the parent afterwards."""
    store = SQLStorage(create_engine(pg_url))
    store.save(MemoryDocument(facts=[Fact(content="kept")]), **scope)

    def backend() -> int:
        with DriverConnection(store.engine) as dbapi:
            return dbapi.execute("SELECT pg_backend_pid()").fetchall()[0][0]

    try:
        parent = backend()
        store.engine.pool.dispose()  # the pooled ones (not the kept one) are closed
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's own exit status says it all
            status = 1
            try:
                os.close(read)
                loaded = [f.content for f in store.load(**scope).facts]
                os.write(write, f"{backend()} {loaded == ['kept']}".encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        with os.fdopen(read) as answer:
            child_pid, child_loaded = answer.read().split()
        assert os.waitpid(child, 0)[1] == 0
        assert child_loaded == "True"
        assert int(child_pid) != parent
        assert backend() == parent  # the parent's connection was neither used nor closed
        assert [f.content for f in store.load(**scope).facts] == ["kept"]
    finally:
        store.engine.dispose()


def test_refused_saves_keep_the_driver_connection(store, scope):
    """A statement the database refuses (a casefold duplicate) leaves the kept connection
    between transactions: it serves the next calls, no new connection is made."""
    store.save(MemoryDocument(facts=[Fact(content="Likes tea")]), **scope)
    store.load(**scope)
    connects: list[object] = []
    event.listen(store.engine, "connect", lambda dbapi_connection, _record: connects.append(1))
    for n in range(5):
        doc = store.load(**scope)
        doc.facts.append(Fact(content="LIKES TEA", id=f"twin-{n}"))
        with pytest.raises(DuplicateFactError):
            store.save(doc, **scope)
    doc = store.load(**scope)
    doc.facts.append(Fact(content="Likes coffee"))
    assert store.save(doc, **scope) == 2
    assert connects == []


@pytest.mark.parametrize("facts", [1, 3])
def test_an_update_writes_only_the_columns_that_changed(store, scope, facts):
    """A fact's confidence changed: its row's text columns are not written again (a marker
    put in its searchable text stays), its confidence and update time are; its text changed:
    the text, key and searchable text are written. One fact (PostgreSQL's one-statement form)
    and several (the multi-row forms)."""
    doc = store.load(**scope)
    doc.facts = [Fact(content=f"Tends bees {i}", confidence=0.9) for i in range(facts)]
    store.save(doc, **scope)
    ids = [fact.id for fact in doc.facts]
    mine = sa.and_(memory_facts.c.user_id == scope["user_id"], memory_facts.c.fact_id.in_(ids))
    with store.engine.begin() as conn:  # behind the store's back (its cache holds the rows)
        conn.execute(sa.update(memory_facts).where(mine).values(search_text="marker"))

    def stored() -> list[tuple[str, float, str, str]]:
        columns = (memory_facts.c.content, memory_facts.c.confidence, memory_facts.c.search_text)
        query = sa.select(*columns, memory_facts.c.content_key).where(
            mine, memory_facts.c.valid_to.is_(None)
        )
        with store.engine.connect() as conn:
            return sorted(tuple(row) for row in conn.execute(query))

    doc = store.load(**scope)
    before = {fact.id: fact.updated_at for fact in doc.facts}
    doc.facts = [fact.replace(confidence=0.5) for fact in doc.facts]
    store.save(doc, **scope)
    assert stored() == [
        (f"Tends bees {i}", 0.5, "marker", fact_digest(f"Tends bees {i}")) for i in range(facts)
    ]
    assert all(f.updated_at > before[f.id] for f in store.load(**scope).facts)

    doc = store.load(**scope)
    doc.facts = [fact.replace(content=f"Keeps bees {i}") for i, fact in enumerate(doc.facts)]
    store.save(doc, **scope)
    rows = stored()
    assert [row[:2] for row in rows] == [(f"Keeps bees {i}", 0.5) for i in range(facts)]
    assert all(row[2] != "marker" and "keep" in row[2] for row in rows)
    assert [row[3] for row in rows] == [fact_digest(f"Keeps bees {i}") for i in range(facts)]


def test_sqlite_saves_of_one_process_queue_on_its_writers_lock(sqlite_url, scope):
    """A save on SQLite waits for the process's writers' lock of its file (the threads queue
    there, not in SQLite's sleeping busy handler), and goes on once it is free; a second
    storage on the same file shares the lock."""
    with open_storage(sqlite_url) as store, open_storage(sqlite_url) as other:
        lock = dialect_of(store.engine).writers(store.engine)
        assert lock is dialect_of(other.engine).writers(other.engine)
        saved = threading.Event()

        def save() -> None:
            doc = other.load(**scope)
            doc.facts.append(Fact(content="Waited its turn"))
            other.save(doc, **scope)
            saved.set()

        with lock:
            writer = threading.Thread(target=save)
            writer.start()
            assert not saved.wait(0.5)  # held back by the lock, not failed
        writer.join(10)
        assert saved.is_set()
        assert [f.content for f in store.load(**scope).facts] == ["Waited its turn"]


def test_after_removals_alone_the_cache_holds_what_a_cold_load_reads(store, scope):
    base = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    facts = [
        Fact(content=f"fact {n}", created_at=base + dt.timedelta(minutes=(n * 7) % 10))
        for n in range(10)
    ]
    store.save(MemoryDocument(facts=facts), **scope)
    doc = store.load(**scope)
    doc.facts = [f for i, f in enumerate(doc.facts) if i % 3]
    store.save(doc, **scope)
    cached = [(f.id, f.content) for f in store.load(**scope).facts]
    store._cache.clear()
    assert cached == [(f.id, f.content) for f in store.load(**scope).facts]
    assert len(cached) == 6
