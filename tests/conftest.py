"""Fixtures shared by the suite: real SQLite files, a PostgreSQL database of this run's own, and
one ``storage`` fixture parametrized over every backend (the contract suite runs on each)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.storage import FileStorage, MemoryStorage, SQLStorage, open_storage

# numpy's OpenBLAS spins a thread per core in every matrix product; on a loaded machine those
# threads fight the other test processes and the local embedding model runs 25 times slower.
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

PG_URL_ENV = "MEMORY_SQL_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(autouse=True)
def _spool_state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Every test's default spool directory (``$XDG_STATE_HOME/memory_sql/spool``) is its own:
    no spool file is left in the home directory, nor adopted by a later test whose database
    URL happens to be the same (a private cluster given the same port)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def pg_server() -> URL:
    """The PostgreSQL server's URL. Without a server the test skips, except under CI=true,
    where it fails: CI must never pass by skipping the database it claims to test."""
    url = make_url(os.environ.get(PG_URL_ENV, DEFAULT_PG_URL))
    engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        message = f"PostgreSQL at {url.render_as_string()} is unreachable: {exc.orig}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="session")
def new_pg_database(pg_server: URL) -> Iterator[Callable[[], URL]]:
    """Makes empty databases on the server; all are dropped when the session ends."""
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make() -> URL:
        name = f"memory_sql_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        made.append(name)
        return pg_server.set(database=name)

    yield make
    with admin.connect() as conn:
        for name in made:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _migrated(url: URL | str) -> str:
    engine = create_engine(url)
    try:
        migrations.upgrade(engine)
    finally:
        engine.dispose()
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    return text


@pytest.fixture(scope="session")
def pg_url(new_pg_database: Callable[[], URL]) -> str:
    """A database of this test run's own, at the schema head. Tests share it: each works in
    scopes of its own (see ``scope``)."""
    return _migrated(new_pg_database())


@pytest.fixture
def own_pg_url(new_pg_database: Callable[[], URL]) -> str:
    """A PostgreSQL database of this test's own, at the schema head: for tests whose flush or
    whole-database operation must meet no other test's rows."""
    return _migrated(new_pg_database())


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return _migrated(f"sqlite:///{tmp_path / 'memory.db'}")


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("files", id="files"),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def target(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """What ``open_storage`` takes for the parametrized backend."""
    if backend == "sqlite":
        return request.getfixturevalue("sqlite_url")
    if backend == "postgresql":
        return request.getfixturevalue("pg_url")
    return str(tmp_path / "memory-files")


@pytest.fixture
def storage(target: str) -> Iterator[MemoryStorage]:
    store = open_storage(target)
    yield store
    assert_no_checked_out_connections(store)
    store.close()


def assert_no_checked_out_connections(store: MemoryStorage | sa.Engine) -> None:
    """No pooled connection left checked out: a leak (those the driver's path keeps between
    calls are detached from the pool)."""
    if isinstance(store, FileStorage):
        return
    engine = store.engine if isinstance(store, SQLStorage) else store
    assert isinstance(engine, sa.Engine), store
    status = engine.pool.status()
    assert "Current Checked out connections: 0" in status, status


@pytest.fixture
def scope() -> dict[str, str]:
    """Scope arguments no other test uses."""
    return {"user_id": f"user-{uuid.uuid4().hex[:10]}", "agent_name": "coder"}


@pytest.fixture
def llm() -> Iterator[object]:
    """A started chat-completions server with scripted replies (``tests/llm_server.py``);
    ``llm_server.llm_config(llm)`` makes a MemoryConfig that points at it."""
    from llm_server import ScriptedLLM

    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def private_pg() -> Iterator[object]:
    """A started PostgreSQL cluster of this test's own (``tests/pg_cluster.py``), to stop,
    restart or kill at will; closed and removed after the test. Without PostgreSQL's server
    binaries the test skips, except under CI=true, where it fails."""
    from pg_cluster import PrivateCluster, find_bindir

    if find_bindir() is None:
        message = "PostgreSQL's server binaries (initdb, postgres) are not installed"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    cluster = PrivateCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


PGBOUNCER_ENV = "MEMORY_SQL_TEST_PGBOUNCER"
"""Set to 1, the service tests (tests/server) reach PostgreSQL through PgBouncer."""


@pytest.fixture(scope="session")
def pgbouncer(pg_server: URL) -> Iterator[object]:
    """A real PgBouncer in transaction-pooling mode in front of the test server
    (``tests/pgbouncer.py``), one per test process: ``pgbouncer.url(direct_url)`` reaches a
    database through it. Without pgbouncer installed the test skips, except under CI=true."""
    from pgbouncer import PGBOUNCER, PgBouncer

    if PGBOUNCER is None:
        if IN_CI:
            pytest.fail("pgbouncer is not installed")
        pytest.skip("pgbouncer is not installed")
    with PgBouncer(pg_server) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def embedding_server() -> Iterator[object]:
    """The real all-MiniLM-L6-v2 behind a real ``/v1/embeddings`` server on 127.0.0.1
    (``memory_sql.demo.embeddings_server``), loaded once per test process. Without the model
    package the test skips, except under CI=true, where it fails (``make`` installs it)."""
    try:
        from memory_sql.demo.embeddings_server import EmbeddingsServer, MiniLM

        model = MiniLM()
    except ImportError as exc:
        if IN_CI:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    with EmbeddingsServer(model) as server:
        yield server
