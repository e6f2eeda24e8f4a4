"""A database memory_sql cannot write is refused up front with a message that says what to
check, never a raw driver message; nothing stored changes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from llm_server import llm_config
from test_service import chat

from memory_sql import StorageError
from memory_sql.database import create_engine
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.service import MemoryService


@pytest.fixture
def immutable() -> Iterator[object]:
    """Marks paths immutable (``chattr +i``: unwritable even for root) and clears them after."""
    marked: list[Path] = []

    def mark(path: Path) -> None:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.strip()}")
        marked.append(path)

    yield mark
    for path in marked:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def rows(url: str) -> int:
    """Queued rows, read without writing anything (SQLite's immutable mode)."""
    path = sa.engine.make_url(url).database
    engine = create_engine(f"sqlite:///file:{path}?immutable=1&uri=true")
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar_one()
    finally:
        engine.dispose()


def test_a_read_only_sqlite_database_is_refused_naming_the_file(sqlite_url, llm):
    path = sa.engine.make_url(sqlite_url).database
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    with pytest.raises(StorageError) as caught:
        MemoryService(llm_config(llm, storage=read_only))
    message = str(caught.value)
    assert path in message and "read-only" in message
    assert "attempt to write" not in message  # the driver's words are explained, not shown


def test_a_sqlite_file_in_a_read_only_folder_is_refused_up_front(
    tmp_path, sqlite_url, immutable, llm
):
    with MemoryService(llm_config(llm, storage=sqlite_url), start=False) as service:
        assert service.after_agent(chat("tea"), thread_id="t", user_id="u")
    folder = Path(sa.engine.make_url(sqlite_url).database).parent
    assert not list(folder.glob("*-wal"))  # a clean close removed it: it must be made again
    immutable(folder)
    with pytest.raises(StorageError) as caught:
        MemoryService(llm_config(llm, storage=sqlite_url))
    message = str(caught.value)
    assert str(folder) in message and "not writable" in message
    assert "unable to open database file" not in message
    assert rows(sqlite_url) == 1


def test_flush_on_a_database_gone_read_only_raises_a_clear_error(sqlite_url, immutable, llm):
    service = MemoryService(llm_config(llm, storage=sqlite_url, debounce_seconds=0), start=False)
    try:
        assert service.after_agent(chat("tea"), thread_id="t", user_id="u")
        path = Path(sa.engine.make_url(sqlite_url).database)
        service.storage.engine.dispose()  # new connections meet the read-only file
        immutable(path)
        immutable(path.parent)
        with pytest.raises(StorageError) as caught:
            service.flush(timeout=2)
        assert str(path) in str(caught.value)
        assert "read-only" in str(caught.value) or "not writable" in str(caught.value)
    finally:
        service.close(timeout=2)
    assert rows(sqlite_url) == 1


@pytest.mark.postgres
def test_a_read_only_postgresql_database_is_refused(new_pg_database, llm):
    from memory_sql import migrations

    url = new_pg_database()
    engine = create_engine(url)
    migrations.upgrade(engine)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(
            f'ALTER DATABASE "{url.database}" SET default_transaction_read_only = on'
        )
    engine.dispose()
    with pytest.raises(StorageError) as caught:
        MemoryService(llm_config(llm, storage=url.render_as_string(hide_password=False)))
    assert "read-only" in str(caught.value) and url.database in str(caught.value)
