"""The dialect module as the one place the databases differ, and the one place SQL is written.

Each member a database backend provides (:mod:`memory_sql.storage.dialects`) is exercised on
both databases: the engine's arguments and per-connection setup, the session setting row-level
security reads, the migration lock, the wake-up kind and the driver fast path; and the error
translator's two classifiers (:func:`~memory_sql.driver_errors.is_refusal`,
:func:`~memory_sql.driver_errors.is_unavailable`) on real errors of each. A scan of the package's
source proves no SQL is written outside ``storage/``."""

from __future__ import annotations

import ast
import re
import socket
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

import memory_sql
from memory_sql import Fact, open_storage
from memory_sql.database import create_engine
from memory_sql.driver_errors import database_errors, is_refusal, is_unavailable
from memory_sql.errors import StorageError
from memory_sql.models import fact_digest, utcnow
from memory_sql.schema import memory_facts
from memory_sql.storage.dialects import PostgreSQL, SQLite, dialect_of
from memory_sql.storage.wakeups import ChangePoller, NotifyListener, wakeup_source
from memory_sql.tenancy import SETTING, acting_for

PACKAGE = Path(memory_sql.__file__).parent

# ---------------------------------------------------------------------------- no SQL outside

_SQL = re.compile(
    r"\b(SELECT\s+[\w*(]|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|PRAGMA\s+\w"
    r"|BEGIN(\s+IMMEDIATE)?\s*$|CREATE\s+(TABLE|INDEX|VIEW|TRIGGER)|ALTER\s+TABLE"
    r"|DROP\s+(TABLE|INDEX|VIEW)|LISTEN\s+\w|NOTIFY\s+\w)"
    r"|\b(set_config|pg_advisory\w*|pg_notify|current_setting)\s*\(",
)

ALLOWED: dict[str, str] = {
    # path (from memory_sql/) -> why SQL text may be written there. Keep it short; none today:
    # the spool's file moved its statements to storage/spool_file.py, the engine's PRAGMAs and
    # the tenant setting to storage/dialects.py, the migration lock to the dialects too.
}


def _sql_literals(source: str) -> list[tuple[int, str]]:
    """The string literals of ``source`` (docstrings aside) that read as SQL."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _SQL.search(node.value)
        ):
            found.append((node.lineno, node.value.strip().splitlines()[0][:60]))
    return found


def test_no_sql_is_written_outside_storage():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("storage/") or relative in ALLOWED:
            continue
        found = _sql_literals(path.read_text(encoding="utf-8"))
        if found:
            offenders[relative] = found
    assert offenders == {}


def test_the_sql_scan_sees_sql_where_it_is():
    """The scanner itself: it finds the statements storage/ writes, skips docstrings and
    prose, and sees SQL built in an f-string."""
    assert _sql_literals((PACKAGE / "storage" / "spool_file.py").read_text()) != []
    assert _sql_literals((PACKAGE / "storage" / "dialects.py").read_text()) != []
    source = (
        '"""SELECT x FROM y in a docstring."""\n'
        'a = "select the facts you want"\n'
        'b = f"DELETE FROM spooled WHERE id IN ({marks})"\n'
        "c = 'SELECT set_config(%s, %s, false)'\n"
    )
    assert sorted(line for line, _ in _sql_literals(source)) == [3, 4]


def test_no_module_outside_the_dialects_tests_for_a_server_database():
    """Code asks the dialect what it needs (``notifies``, ``fast_path``, ``row_security``…),
    not whether the database is a server."""
    # migrations.py: a file database (made by opening it) is created at the schema head.
    allowed = {"storage/dialects.py", "migrations.py"}
    offenders = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).as_posix() not in allowed
        and re.search(r"dialect\w*\([^)]*\)\.server\b|\bis_server\(", path.read_text())
    ]
    assert offenders == []


# ----------------------------------------------------------------------------- the members


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def test_each_database_has_its_members():
    sqlite, postgres = dialect_of("sqlite"), dialect_of("postgresql")
    assert (sqlite.fast_path, sqlite.notifies) == ("sqlite3", False)
    assert (postgres.fast_path, postgres.notifies) == ("psycopg", True)
    assert isinstance(sqlite, SQLite) and isinstance(postgres, PostgreSQL)


def test_engine_arguments_add_defaults_and_keep_the_callers():
    sqlite = dialect_of("sqlite").engine_arguments({}, statement_timeout=5, connect_timeout=2)
    assert sqlite == {"connect_args": {"timeout": 30.0}}
    mine = {"connect_args": {"timeout": 1}}
    assert dialect_of("sqlite").engine_arguments(mine, statement_timeout=5, connect_timeout=2)[
        "connect_args"
    ] == {"timeout": 1}
    pg = dialect_of("postgresql").engine_arguments(
        {"connect_args": {"options": "-c work_mem=8MB"}}, statement_timeout=6, connect_timeout=2
    )
    assert pg["pool_timeout"] == 2 and pg["connect_args"]["connect_timeout"] == 2
    assert pg["connect_args"]["options"] == (
        "-c work_mem=8MB -c TimeZone=UTC -c statement_timeout=6000 -c lock_timeout=2000"
    )
    unlimited = dialect_of("postgresql").engine_arguments(
        {}, statement_timeout=None, connect_timeout=2
    )
    assert unlimited["connect_args"]["options"] == "-c TimeZone=UTC"


def test_a_sqlite_engine_is_prepared_by_its_dialect(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'prepared.db'}")
    try:
        with engine.connect() as conn:
            pragmas = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
            }
        assert pragmas == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": 30_000,
            "synchronous": 1,  # NORMAL
        }
    finally:
        engine.dispose()
    memory = create_engine("sqlite://")
    try:
        with memory.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "memory"
    finally:
        memory.dispose()


@pytest.mark.postgres
def test_a_postgresql_engine_is_prepared_by_its_dialect(pg_url):
    engine = create_engine(pg_url, statement_timeout=9)
    try:
        with engine.connect() as conn:
            shown = conn.execute(
                sa.text(
                    "SELECT current_setting('TimeZone'), current_setting('statement_timeout'),"
                    " current_setting('lock_timeout'), current_setting(:setting)"
                ),
                {"setting": SETTING},
            ).one()
        assert tuple(shown) == ("UTC", "9s", "3s", "*")
        with acting_for("acme"), engine.connect() as conn:
            assert conn.execute(sa.text("SELECT current_setting(:s)"), {"s": SETTING}).scalar() == (
                "acme"
            )
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_set_session_outlives_a_rollback(pg_url):
    engine = create_engine(pg_url)
    try:
        raw = engine.raw_connection()
        try:
            dbapi = raw.driver_connection
            dialect_of(engine).set_session(dbapi, "memory_sql.probe", "kept")
            assert dbapi.autocommit is False  # as it was
            # A transaction's own change is undone by its rollback; the session's stays.
            dbapi.execute("SELECT set_config('memory_sql.probe', 'undone', false)")
            dbapi.rollback()
            value = dbapi.execute("SELECT current_setting('memory_sql.probe')").fetchone()[0]
            assert value == "kept"
        finally:
            raw.invalidate()
    finally:
        engine.dispose()
    with pytest.raises(NotImplementedError, match="sqlite"):
        dialect_of("sqlite").set_session(None, "x", "y")


def _held_elsewhere(engine: sa.Engine) -> bool:
    """Whether another connection is kept out of the migration's lock right now."""
    dialect = dialect_of(engine)
    if dialect.fast_path == "sqlite3":
        other = sqlite3.connect(engine.url.database, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError as exc:
            assert is_unavailable(exc)  # "database is locked"
            return True
        finally:
            other.close()
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(7, 8)")).scalar()
        conn.rollback()
        return not got


def test_lock_transaction_keeps_others_out_until_the_transaction_ends(url):
    engine = create_engine(url)
    dialect = dialect_of(engine)
    try:
        assert not _held_elsewhere(engine)
        with engine.connect().execution_options(**dialect.write_options) as conn:
            with conn.begin():
                dialect.lock_transaction(conn, (7, 8))
                assert _held_elsewhere(engine)
            assert not _held_elsewhere(engine)
    finally:
        engine.dispose()


def test_the_wakeup_source_is_the_dialects(url):
    engine = create_engine(url)
    try:
        source = wakeup_source(engine, on_due=lambda due: None, on_change=lambda: None)
        expected = NotifyListener if dialect_of(engine).notifies else ChangePoller
        assert isinstance(source, expected)
    finally:
        engine.dispose()


# ------------------------------------------------------------------------ the two classifiers


def _refused(store, user: str) -> BaseException:
    """A second row with a stored fact's id (another content): the primary key refuses it."""
    doc = store.load(user_id=user)
    doc.facts = [Fact(id="f-1", content="Likes tea")]
    store.save(doc, user_id=user)
    now = utcnow()
    row = {
        "tenant_id": "default",
        "user_id": user,
        "agent_name": "",
        "fact_id": "f-1",
        "content": "Something else",
        "content_key": fact_digest("Something else"),
        "category": "context",
        "confidence": 0.5,
        "created_at": now,
        "updated_at": now,
    }
    with pytest.raises(sa.exc.IntegrityError) as raised, store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(row))
    return raised.value


def test_a_constraint_is_a_refusal_by_its_name_on_both_databases(url, request):
    store = open_storage(url)
    try:
        error = _refused(store, f"refusal-{request.node.callspec.id}-{id(store)}")
        assert is_refusal(error)
        assert is_refusal(error, str(memory_facts.primary_key.name))
        assert not is_refusal(error, "uq_memory_facts_live_content_key")
        assert not is_unavailable(error)
        assert not is_refusal(ValueError("UNIQUE constraint failed: memory_facts.fact_id"))
    finally:
        store.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_database_not_to_be_reached_is_unavailable(tmp_path):
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/none")
    try:
        with (
            pytest.raises(StorageError) as raised,
            database_errors(engine, "probing"),
            engine.connect(),
        ):
            pass
        assert is_unavailable(raised.value) and is_unavailable(raised.value.__cause__)
        assert not is_refusal(raised.value.__cause__)
    finally:
        engine.dispose()
    sqlite_engine = create_engine(f"sqlite:///{tmp_path / 'plain.db'}")
    try:
        with pytest.raises(sa.exc.OperationalError) as missing, sqlite_engine.connect() as conn:
            conn.execute(sa.text("SELECT * FROM no_such_table"))
        assert not is_unavailable(missing.value)  # a statement refused, not an outage
    finally:
        sqlite_engine.dispose()


def test_a_locked_sqlite_file_is_unavailable(tmp_path):
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    try:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError) as raised:
            other.execute("BEGIN IMMEDIATE")
        other.close()
        assert is_unavailable(raised.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


class _NoFastPath(SQLite):
    """SQLite as a database added without hand-written driver paths would be."""

    fast_path = None


def test_a_database_without_a_fast_path_runs_on_sqlalchemy_alone(tmp_path, monkeypatch):
    """What lets a new backend leave ``storage/driver.py`` and ``storage/sql.py`` alone."""
    from memory_sql.storage import dialects, driver

    url = f"sqlite:///{tmp_path / 'plain.db'}"
    memory_sql.migrations.upgrade(url)
    monkeypatch.setitem(dialects._DIALECTS, "sqlite", _NoFastPath())
    store = open_storage(url)
    try:
        assert not driver.unobserved(store.engine)
        doc = store.load(user_id="u")
        doc.facts = [Fact(content="Drinks tea")]
        store.save(doc, user_id="u", expected_version=0)
        again = store.load(user_id="u")
        assert [f.content for f in again.facts] == ["Drinks tea"] and again.version == 1
        again.facts.append(Fact(content="Lives in Porto"))
        store.save(again, user_id="u", expected_version=1)
        assert len(store.load(user_id="u").facts) == 2
    finally:
        store.close()
