"""The embedded default just works: a new or empty SQLite database gets the schema on first open
(open_storage, MemoryService), logged once; PostgreSQL, and a SQLite file at an older revision,
are migrated only with ``auto_migrate``; ``memory_sql.upgrade(url)`` does it from a program."""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy as sa
from llm_server import llm_config

import memory_sql
from memory_sql import (
    Fact,
    MemoryConfig,
    MemoryService,
    SchemaOutOfDateError,
    migrations,
    open_storage,
)
from memory_sql.database import create_engine

HEAD = migrations.head_revision()
CHAT = [{"role": "user", "content": "I use vim"}, {"role": "assistant", "content": "Noted"}]
UPDATE = (
    '{"user": {}, "history": {}, "newFacts": '
    '[{"content": "Uses vim", "category": "preference", "confidence": 0.9, '
    '"scope": "user", "durability": "durable", "authority": "descriptive"}]}'
)


def revision(url) -> str | None:
    engine = create_engine(url)
    try:
        return migrations.current_revision(engine)
    finally:
        engine.dispose()


def created(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "memory_sql.migrations" and r.levelno == logging.INFO
    ]


@pytest.fixture(autouse=True)
def _info(caplog):
    caplog.set_level(logging.INFO, logger="memory_sql.migrations")


def older_sqlite_with_a_fact(path) -> str:
    """A SQLite file at revision 0005 holding one fact."""
    url = f"sqlite:///{path}"
    migrations.upgrade(url, "0005")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version, "
                "created_at, updated_at) VALUES ('default', 'u', '', 1, :t, :t)"
            ),
            {"t": "2026-01-01 00:00:00.000000"},
        )
    engine.dispose()
    return url


# SQLite ----------------------------------------------------------------------------------------


def test_a_new_sqlite_file_gets_the_schema_on_first_open_logged_once(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with open_storage(url) as storage:
        doc = storage.load(user_id="u")
        doc.facts.append(Fact(content="Prefers tabs", category="preference"))
        storage.save(doc, user_id="u", expected_version=doc.version)
    assert revision(url) == HEAD
    assert created(caplog) == [
        f"memory_sql: {tmp_path / 'new.db'}: created the schema at revision {HEAD}"
    ]
    with open_storage(url) as storage:
        assert [f.content for f in storage.load(user_id="u").facts] == ["Prefers tabs"]
    assert len(created(caplog)) == 1


def test_an_empty_sqlite_file_gets_the_schema_too(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    open_storage(f"sqlite:///{path}").close()
    assert revision(f"sqlite:///{path}") == HEAD


def test_a_service_on_a_new_sqlite_file_just_works(tmp_path, llm, caplog):
    url = f"sqlite:///{tmp_path / 'service.db'}"
    llm.reply(UPDATE)
    with MemoryService(llm_config(llm, storage=url, debounce_seconds=0)) as service:
        assert service.after_agent(CHAT, thread_id="t1", user_id="u")
        assert service.flush(timeout=10)
        assert "Uses vim" in service.memory_context(user_id="u")
    assert len(created(caplog)) == 1


def test_processes_opening_one_new_file_at_once_migrate_it_once(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'raced.db'}"
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            open_storage(url).close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    assert revision(url) == HEAD
    assert len(created(caplog)) == 1


def test_a_sqlite_file_at_an_older_revision_is_not_migrated_without_auto_migrate(tmp_path, caplog):
    url = older_sqlite_with_a_fact(tmp_path / "older.db")
    caplog.clear()
    with pytest.raises(SchemaOutOfDateError, match="is at revision 0005.*memory-sql db upgrade"):
        open_storage(url)
    with pytest.raises(SchemaOutOfDateError, match="0005"):
        MemoryService(MemoryConfig(storage=url), start=False)
    assert revision(url) == "0005" and created(caplog) == []

    with MemoryService(MemoryConfig(storage=url, auto_migrate=True), start=False) as service:
        assert service.storage.load(user_id="u").version == 1  # the data is kept
    assert revision(url) == HEAD
    assert created(caplog) == [
        f"memory_sql: {tmp_path / 'older.db'}: migrated from revision 0005 to revision {HEAD}"
    ]


def test_memory_sql_tables_without_a_revision_are_left_alone(tmp_path):
    url = f"sqlite:///{tmp_path / 'unstamped.db'}"
    migrations.upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE alembic_version"))
    engine.dispose()
    for config in (MemoryConfig(storage=url), MemoryConfig(storage=url, auto_migrate=True)):
        with pytest.raises(SchemaOutOfDateError, match="memory_sql tables but no schema revision"):
            MemoryService(config, start=False)


def test_a_revision_from_a_newer_memory_sql_is_refused_even_with_auto_migrate(tmp_path):
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    migrations.upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(SchemaOutOfDateError, match="upgrade memory_sql"):
        MemoryService(MemoryConfig(storage=url, auto_migrate=True), start=False)


def test_memory_sql_upgrade_from_a_program(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'program.db'}"
    assert memory_sql.upgrade(url) == HEAD
    assert memory_sql.upgrade(url) == HEAD  # at head already: nothing happens, nothing logged
    assert len(created(caplog)) == 1
    stepwise = f"sqlite:///{tmp_path / 'stepwise.db'}"
    assert memory_sql.upgrade(stepwise, "0005") == "0005"  # "head" or a revision, as the CLI
    assert memory_sql.upgrade(stepwise) == HEAD
    assert "upgrade" in memory_sql.__all__


def test_auto_migrate_is_a_config_key_off_by_default():
    assert MemoryConfig().auto_migrate is False
    assert MemoryConfig.from_env({"MEMORY_SQL_AUTO_MIGRATE": "true"}).auto_migrate is True


# PostgreSQL ------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgresql_needs_an_upgrade_unless_auto_migrate(new_pg_database, caplog):
    url = new_pg_database().render_as_string(hide_password=False)
    with pytest.raises(SchemaOutOfDateError, match="has no memory_sql tables.*db upgrade"):
        open_storage(url)
    with pytest.raises(SchemaOutOfDateError):
        MemoryService(MemoryConfig(storage=url), start=False)
    assert revision(url) is None and created(caplog) == []

    with MemoryService(MemoryConfig(storage=url, auto_migrate=True), start=False) as service:
        assert service.storage.load(user_id="u").version == 0
    assert revision(url) == HEAD and len(created(caplog)) == 1
    open_storage(url).close()  # at head: opens as before


@pytest.mark.postgres
def test_memory_sql_upgrade_on_postgresql(new_pg_database):
    url = new_pg_database().render_as_string(hide_password=False)
    assert memory_sql.upgrade(url) == HEAD
    open_storage(url).close()
