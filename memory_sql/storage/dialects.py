"""Every difference between the two databases memory_sql runs on, SQLite and PostgreSQL.

The rest of the code asks :func:`dialect_of` for the database's :class:`SQLDialect` and calls
it; nothing else tests which database it is on (``migrations.py`` and the Alembic revisions,
frozen, excepted). A new database is one more subclass here.

- the write transaction: SQLite takes its write lock at ``BEGIN IMMEDIATE`` so a
  read-then-write transaction waits for other writers instead of failing (and the threads of
  one process queue for it on a lock of their own, :meth:`SQLDialect.writers`); PostgreSQL
  locks rows (:meth:`SQLDialect.lock_rows`, ``FOR UPDATE [SKIP LOCKED]``);
- insert-ignore and upsert (``ON CONFLICT``), whose builders are per dialect in SQLAlchemy;
- whether the database is a file (another process sees it through the file) or a server;
- the full-text index's match (one memory's facts holding any term, with their text or their
  BM25 score) and the search condition across memories (every term, as a prefix too), with
  its rank;
- the engine: its arguments (:meth:`SQLDialect.engine_arguments`: SQLite's busy timeout,
  PostgreSQL's connect and statement timeouts) and what each new connection gets
  (:meth:`SQLDialect.prepare_engine`: SQLite's PRAGMAs and ``BEGIN``, PostgreSQL's tenant
  setting through :meth:`SQLDialect.set_session`);
- the migration lock (:meth:`SQLDialect.lock_transaction`: SQLite's write lock, a PostgreSQL
  advisory lock), the queue's wake-ups (:attr:`SQLDialect.notifies`: ``LISTEN/NOTIFY``, or
  polling the file) and the driver fast paths (:attr:`SQLDialect.fast_path`).

:func:`memory_sql.database.create_engine` and :mod:`memory_sql.migrations`, below ``storage/``
in the layering, read this module when called (it imports only :mod:`memory_sql.scope`,
:mod:`memory_sql.tenancy` and :mod:`memory_sql.driver_errors`).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.engine.default import DefaultDialect

from .. import tenancy
from ..driver_errors import SQLITE_BUSY_TIMEOUT_SECONDS, is_locked
from ..scope import Scope


class SQLDialect:
    """What differs between databases; one instance per database kind, shared."""

    name: str
    server: bool
    """A server reached over connections (PostgreSQL), not a file (SQLite)."""
    row_security: bool = False
    """Roles and row-level security (each tenant's rows kept from the others by the database
    itself, revision 0009); without them isolation is the tenant filter of every query."""
    write_options: Mapping[str, str] = {}
    """Execution options of a connection whose transaction will write (see
    :func:`memory_sql.database.create_engine`: SQLite's ``sqlite_begin``)."""
    begin_write: str = "BEGIN"
    """The statement opening a write transaction on the driver itself."""
    writable_probe: str = ""
    """A statement that fails on a read-only database and writes nothing."""
    raw_fts: bool = False
    """Whether the full-text match reads the memory's texts for BM25 in Python
    (:attr:`fts_match_sql` returns ``fact_id, search_text, tenant_id, user_id, agent_name``)
    rather than scores (``fact_id, score``)."""
    writes_in_ctes: bool = False
    """Whether a statement may hold data-modifying CTEs (``WITH moved AS (INSERT …) DELETE
    …``): two writes in one round trip."""

    drivers: tuple[str, ...] = ()
    """The SQLAlchemy driver names memory_sql accepts for the database (``scheme+driver``)."""
    fast_path: str | None = None
    """The driver whose hand-written paths (:mod:`.driver`, :class:`~.sql.SQLStorage`'s
    one-statement save and reads) the database takes: ``"psycopg"`` or ``"sqlite3"``; None
    (a database added without them): SQLAlchemy's paths only, which every feature has."""
    notifies: bool = False
    """Whether the database tells a listener of new queue work (``LISTEN``/``NOTIFY``,
    :mod:`.wakeups`); otherwise a worker polls the file."""

    _insert: Any

    def writers(self, engine: Engine) -> AbstractContextManager[Any]:
        """What a save holds around its write transaction on ``engine``'s database: nothing
        where the database queues writers itself (PostgreSQL's row locks)."""
        return nullcontext()

    # the engine -----------------------------------------------------------------------------

    def engine_arguments(
        self,
        kwargs: dict[str, Any],
        *,
        statement_timeout: float | None,
        connect_timeout: float,
        prepare_threshold: int | None = None,
    ) -> dict[str, Any]:
        """``kwargs`` for ``sqlalchemy.create_engine`` with this database's defaults added
        (what the caller set is kept); ``prepare_threshold``: executions of a statement on a
        connection before the driver prepares it on the server, where it does (None: never).
        A setting that must win over every other (a pooler's "never prepare") is applied to
        the result, after this."""
        return kwargs

    def prepare_engine(self, engine: Engine, *, tenant_default: str) -> None:
        """Install what each connection of ``engine`` needs when it is made, begun or checked
        out (``tenant_default``: the tenant a connection acts for outside any
        :func:`~memory_sql.tenancy.acting_for`, where the database keeps tenants apart)."""

    def set_session(self, dbapi_connection: Any, name: str, value: str) -> None:
        """Set the session setting ``name`` to ``value`` on a driver connection, outside any
        transaction (no rollback undoes it). Raises the driver's error."""
        raise NotImplementedError(f"{self.name} has no session settings")

    def local_settings(self, settings: Iterable[tuple[str, str]]) -> str:
        """One statement that sets each ``(name, value)`` for the current transaction only
        (``SET LOCAL``), values inlined: what a statement behind a pooler in transaction mode
        is preceded by (:mod:`memory_sql.pooling`)."""
        raise NotImplementedError(f"{self.name} has no session settings")

    def lock_transaction(self, connection: Connection, key: tuple[int, int]) -> None:
        """Hold the lock ``key`` until ``connection``'s transaction (begun with
        :attr:`write_options`) ends: one such transaction at a time, across processes."""

    def insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT (it has ``on_conflict_do_nothing/_update``)."""
        return self._insert(table)

    def insert_ignore(self, table: sa.Table) -> Any:
        """``INSERT … ON CONFLICT DO NOTHING``: a row whose key is taken is skipped."""
        return self._insert(table).on_conflict_do_nothing()

    def upsert(
        self,
        table: sa.Table,
        values: Mapping[str, Any] | None,
        keys: Iterable[str],
        set_: Mapping[str, Any] | Iterable[str],
    ) -> Any:
        """``INSERT … ON CONFLICT (keys) DO UPDATE``: ``set_`` maps columns to new values (an
        ``excluded`` column is ``sa.literal_column``-free: pass the column names to take the
        inserted value)."""
        insert = self._insert(table)
        if values is not None:
            insert = insert.values(**values)
        if not isinstance(set_, Mapping):
            set_ = {name: insert.excluded[name] for name in set_}
        return insert.on_conflict_do_update(
            index_elements=[table.c[name] for name in keys], set_=dict(set_)
        )

    def lock_rows(
        self, query: sa.Select[Any], *, of: Any = None, skip_locked: bool = False
    ) -> sa.Select[Any]:
        """``query`` locking the rows it reads until the transaction ends (no-op where the
        whole database is locked by the write transaction already)."""
        return query

    def locks_rows(self) -> bool:
        """Whether :meth:`lock_rows` locks (rows a concurrent transaction locked are then
        skipped, or waited for)."""
        return False

    def driver_paramstyle(self, dialect: sa.Dialect) -> sa.Dialect:
        """``dialect`` compiling named parameters for the driver itself."""
        return dialect

    # replicas -------------------------------------------------------------------------------

    replay_position_sql: str | None = None
    """On the primary: its current write position (WAL LSN) as text; None where the database
    has no replicas (SQLite), whose replica lag is then 0."""
    replica_lag_sql: str | None = None
    """On a replica, given ``%(primary)s`` (the primary's position, or NULL when it could not
    be read): seconds its replay trails the primary, 0 when it has replayed that position (or,
    without one, all it received) or is no standby at all."""

    # full-text ------------------------------------------------------------------------------

    fts_match_sql: str = ""

    def fts_match_params(
        self, engine: Engine, scope: Scope, terms: list[str], *, limit: int, most: int
    ) -> dict[str, Any]:
        raise NotImplementedError

    def search_condition(
        self, engine: Engine, terms: list[str]
    ) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
        """A condition on ``memory_facts`` true for facts holding every term (each also as a
        prefix), and a relevance to order by (higher is better)."""
        raise NotImplementedError

    def driver_sql(self, sql: str) -> str:
        """SQL written with the driver's ``%(name)s`` parameters, as SQLAlchemy's text() reads
        it."""
        return sql


_WRITERS: dict[str, threading.RLock] = {}
"""SQLite's writers' locks, by database file (:meth:`SQLite.writers`); never removed (one
small lock per file a process ever wrote)."""
_WRITERS_GUARD = threading.Lock()


class SQLite(SQLDialect):
    name = "sqlite"
    server = False
    drivers = ("sqlite", "sqlite+pysqlite")
    fast_path = "sqlite3"
    write_options = {"sqlite_begin": "IMMEDIATE"}
    begin_write = "BEGIN IMMEDIATE"
    # Rewrites the migration stamp to itself (rolled back).
    writable_probe = "UPDATE alembic_version SET version_num = version_num"
    _insert = staticmethod(sqlite.insert)

    def engine_arguments(
        self,
        kwargs: dict[str, Any],
        *,
        statement_timeout: float | None,
        connect_timeout: float,
        prepare_threshold: int | None = None,
    ) -> dict[str, Any]:
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_SECONDS)
        return kwargs

    def prepare_engine(self, engine: Engine, *, tenant_default: str) -> None:
        """WAL journaling (a file), the busy timeout, foreign keys; and real transactions:
        SQLAlchemy emits ``BEGIN`` itself (pysqlite would defer it to the first write, so two
        reads in one transaction could see different data), ``BEGIN IMMEDIATE`` on a
        connection with :attr:`write_options`. No row-level security: the tenant filter of
        every query is the isolation."""
        is_file = engine.url.database not in (None, "", ":memory:")

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            if is_file:
                _journal_mode_wal(cursor)
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: sa.Connection) -> None:
            options = connection.get_execution_options()
            if options.get("isolation_level") == "AUTOCOMMIT":
                return
            connection.exec_driver_sql(f"BEGIN {options.get('sqlite_begin', '')}".strip())

    def lock_transaction(self, connection: Connection, key: tuple[int, int]) -> None:
        """The transaction holds the file's write lock from its ``BEGIN IMMEDIATE`` on: one
        lock for the whole database, whatever ``key``."""

    def driver_paramstyle(self, dialect: sa.Dialect) -> sa.Dialect:
        return cast("type[DefaultDialect]", type(dialect))(paramstyle="named")

    def writers(self, engine: Engine) -> AbstractContextManager[Any]:
        """One lock per database file in the process, taken before ``BEGIN IMMEDIATE``: the
        process's threads queue on it and each is woken as the one before commits, where
        SQLite's busy handler would have them sleep and poll (1, 2, 5, 10 … ms) for its write
        lock. Other processes still meet at the file's lock and its busy timeout. Re-entrant:
        a thread that holds it may write again (SQLite then decides, as without it)."""
        database = engine.url.database
        if database in (None, "", ":memory:") or engine.url.query.get("mode") == "memory":
            key = f"engine:{id(engine)}"
        else:
            key = os.path.realpath(database)
        with _WRITERS_GUARD:
            lock = _WRITERS.get(key)
            if lock is None:
                lock = _WRITERS[key] = threading.RLock()
        return lock

    # The best rows first, by the index alone (its scope term keeps it to the memory's live
    # facts: a closed fact's term differs, revision 0015); then their facts, the scope checked
    # again.
    fts_match_sql = """
SELECT f.fact_id, -h.score
FROM (SELECT rowid, bm25(memory_facts_fts, 1.0, 0.0) AS score
      FROM memory_facts_fts WHERE memory_facts_fts MATCH :match
      ORDER BY score LIMIT :limit) AS h
JOIN memory_facts AS f ON f.rowid = h.rowid
WHERE f.tenant_id = :tenant AND f.user_id = :user AND f.agent_name = :agent
ORDER BY h.score, f.fact_id"""

    def fts_match_params(
        self, engine: Engine, scope: Scope, terms: list[str], *, limit: int, most: int
    ) -> dict[str, Any]:
        alternatives = " OR ".join(_quoted_phrase(term) + " *" for term in terms)
        own = _quoted_phrase(scope_term(scope))
        return {
            "tenant": scope.tenant_id,
            "user": scope.user_id,
            "agent": scope.agent_key,
            "match": f"scope_key : {own} AND search_text : ({alternatives})",
            "limit": limit,
        }

    def search_condition(
        self, engine: Engine, terms: list[str]
    ) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
        match = "search_text : (" + " AND ".join(_quoted_phrase(t) + " *" for t in terms) + ")"
        fts = sa.text(
            "SELECT rowid, bm25(memory_facts_fts, 1.0, 0.0) AS rank FROM memory_facts_fts "
            "WHERE memory_facts_fts MATCH :search_match"
        ).bindparams(search_match=match)
        hits = fts.columns(sa.column("rowid", sa.Integer), sa.column("rank", sa.Float)).subquery()
        rowid: sa.ColumnElement[Any] = sa.literal_column("memory_facts.rowid")
        relevance = sa.select(-hits.c.rank).where(hits.c.rowid == rowid).scalar_subquery()
        return rowid.in_(sa.select(hits.c.rowid)), relevance


class PostgreSQL(SQLDialect):
    name = "postgresql"
    server = True
    drivers = ("postgresql+psycopg",)
    fast_path = "psycopg"
    notifies = True
    row_security = True
    # Read-only transactions refuse any UPDATE before looking for rows; a role the service
    # runs as may update the queue, not the migration stamp.
    writable_probe = "UPDATE memory_pending_updates SET attempts = attempts WHERE false"
    raw_fts = True
    writes_in_ctes = True
    _insert = staticmethod(postgresql.insert)

    replay_position_sql = "SELECT CAST(pg_current_wal_lsn() AS text)"
    # Behind the position: as old as the last transaction replayed (its commit time on the
    # primary), infinitely when none has been (a replica that just started).
    replica_lag_sql = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0.0
    WHEN pg_wal_lsn_diff(
        COALESCE(CAST(CAST(%(primary)s AS text) AS pg_lsn), pg_last_wal_receive_lsn()),
        pg_last_wal_replay_lsn()
    ) <= 0 THEN 0.0
    ELSE COALESCE(
        EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()),
        'Infinity'
    )::float8
END"""

    def engine_arguments(
        self,
        kwargs: dict[str, Any],
        *,
        statement_timeout: float | None,
        connect_timeout: float,
        prepare_threshold: int | None = None,
    ) -> dict[str, Any]:
        """Connections recycled after 30 minutes; connecting and a pool checkout give up after
        ``connect_timeout``; a statement after ``statement_timeout`` seconds (None: no limit),
        a lock wait after a third of it; timestamps arrive in UTC, as they are kept (no
        conversion per value on the way in); psycopg's ``prepare_threshold``."""
        kwargs.setdefault("pool_recycle", 1800)
        kwargs.setdefault("pool_timeout", connect_timeout)
        connect_args = kwargs.setdefault("connect_args", {})
        connect_args.setdefault("connect_timeout", int(connect_timeout))
        options = "-c TimeZone=UTC"
        if statement_timeout is not None:
            options += (
                f" -c statement_timeout={int(statement_timeout * 1000)}"
                f" -c lock_timeout={int(statement_timeout * 1000 / 3)}"
            )
        connect_args["options"] = f"{connect_args.get('options', '')} {options}".strip()
        connect_args.setdefault("prepare_threshold", prepare_threshold)
        return kwargs

    def prepare_engine(self, engine: Engine, *, tenant_default: str) -> None:
        """Each connection handed out carries the tenant row-level security lets it see
        (:func:`memory_sql.tenancy.guard_engine`)."""
        tenancy.guard_engine(engine, default=tenant_default, set_session=self.set_session)

    def set_session(self, dbapi_connection: Any, name: str, value: str) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, %s, false)", (name, value))
        dbapi_connection.autocommit = autocommit

    def local_settings(self, settings: Iterable[tuple[str, str]]) -> str:
        quoted = (
            f"set_config('{name}', '{value.replace(chr(39), chr(39) * 2)}', true)"
            for name, value in settings
        )
        return "SELECT " + ", ".join(quoted)

    def lock_transaction(self, connection: Connection, key: tuple[int, int]) -> None:
        """A transaction-level advisory lock (released at commit or rollback)."""
        connection.execute(
            sa.text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": key[0], "b": key[1]}
        )

    def lock_rows(
        self, query: sa.Select[Any], *, of: Any = None, skip_locked: bool = False
    ) -> sa.Select[Any]:
        return query.with_for_update(of=of, skip_locked=skip_locked)

    def locks_rows(self) -> bool:
        return True

    # The memory's live facts holding any of the terms, found through the GIN index (partial:
    # live rows only, revision 0015), with their searchable text: BM25 is computed from it.
    fts_match_sql = """
SELECT fact_id, search_text, tenant_id, user_id, agent_name FROM memory_facts
WHERE valid_to IS NULL AND search_vector @@ (
    CAST(%(memory)s AS tsquery) && to_tsquery(CAST(%(config)s AS regconfig), %(query)s)
)
LIMIT %(most)s"""

    def fts_match_params(
        self, engine: Engine, scope: Scope, terms: list[str], *, limit: int, most: int
    ) -> dict[str, Any]:
        return {
            "memory": _quoted_lexeme(pg_scope_term(scope)),
            "config": text_search_config(engine),
            "query": " | ".join(_quoted_lexeme(term) + ":*" for term in terms),
            "most": most,
        }

    def search_condition(
        self, engine: Engine, terms: list[str]
    ) -> tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]:
        config = sa.cast(text_search_config(engine), _REGCONFIG)
        vector = sa.literal_column("memory_facts.search_vector", _TSVECTOR)
        text = " & ".join(_quoted_lexeme(term) + ":*" for term in terms)
        query = sa.func.to_tsquery(config, text, type_=_TSQUERY)
        size = _pg_estimated_size()
        relevance = sum(
            (
                _pg_idf(config, term, size) * sa.func.ts_rank(vector, _pg_prefix(config, term), 1)
                for term in dict.fromkeys(terms)
            ),
            sa.literal(0.0),
        )
        return vector.op("@@")(query), relevance

    def driver_sql(self, sql: str) -> str:
        return re.sub(r"%\((\w+)\)s", r":\1", sql)


_DIALECTS: dict[str, SQLDialect] = {d.name: d for d in (SQLite(), PostgreSQL())}


def dialect_of(bind: Engine | Connection | sa.Dialect | URL | str) -> SQLDialect:
    """The :class:`SQLDialect` of an engine, a connection, a SQLAlchemy dialect, a URL or a
    backend name."""
    if isinstance(bind, str):
        name = bind
    elif isinstance(bind, URL):
        name = bind.get_backend_name()
    elif isinstance(bind, sa.Dialect):
        name = bind.name
    else:
        name = bind.dialect.name
    try:
        return _DIALECTS[name]
    except KeyError:
        raise ValueError(
            f"unsupported database {name!r}: memory_sql runs on SQLite and PostgreSQL"
        ) from None


def supported_drivers() -> tuple[str, ...]:
    """Every driver name of :attr:`SQLDialect.drivers`, of every database."""
    return tuple(driver for dialect in _DIALECTS.values() for driver in dialect.drivers)


def is_server(bind: Engine | Connection | sa.Dialect | URL | str) -> bool:
    """Whether the database is a server (PostgreSQL), not a file other processes share."""
    return dialect_of(bind).server


def database_file(url: URL) -> str | None:
    """The file a file database's URL names (``sqlite:///path.db``, or
    ``sqlite:///file:path?uri=true``); None for a server, an in-memory database or a database
    memory_sql does not know."""
    dialect = _DIALECTS.get(url.get_backend_name())
    if dialect is None or dialect.server:
        return None
    database = url.database or ""
    if str(url.query.get("uri", "")).lower() in ("true", "1") and database.startswith("file:"):
        if str(url.query.get("mode", "")) == "memory":
            return None
        database = unquote(urlsplit(database).path)
    if database in ("", ":memory:"):
        return None
    return database


def write_options(bind: Engine | Connection) -> Mapping[str, str]:
    """:attr:`SQLDialect.write_options` of ``bind``'s database."""
    return dialect_of(bind).write_options


def _journal_mode_wal(cursor: Any) -> None:
    """Switch a SQLite file to WAL journaling (it stays so). Connections racing on a file
    still in rollback mode (processes opening a new database at once) can get "database is
    locked" here at once, SQLite's busy handler not being called for it: tried again."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_SECONDS
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as exc:
            if not is_locked(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


# full-text helpers -------------------------------------------------------------------------


def pg_scope_term(scope: Scope) -> str:
    """The term of PostgreSQL's ``search_vector`` for ``scope``'s memory, as revision 0011's
    generated column makes it (``'s' || md5(tenant || chr(31) || user || chr(31) || agent)``;
    the rows read are checked against the scope all the same)."""
    key = "\x1f".join((scope.tenant_id, scope.user_id, scope.agent_key))
    return "s" + hashlib.md5(key.encode("utf-8"), usedforsecurity=False).hexdigest()


def scope_term(scope: Scope) -> str:
    """The term of the FTS5 table's ``scope_key`` for ``scope``: as revision 0011's triggers
    write it (``'s' || hex(tenant || char(31) || user || char(31) || agent)``), folded."""
    key = "\x1f".join((scope.tenant_id, scope.user_id, scope.agent_key))
    return "s" + key.encode("utf-8").hex()


def text_search_config(engine: Engine) -> str:
    """The text search configuration of PostgreSQL's ``search_vector`` column (revision 0011
    chose it), read once per engine."""
    known = _CONFIGS.get(engine)
    if known is None:
        with engine.connect() as conn:
            expression = conn.exec_driver_sql(_COLUMN_EXPRESSION).scalar()
        found = re.search(r"'([^']+)'::regconfig", expression or "")
        known = _CONFIGS[engine] = found.group(1) if found else "simple"
    return known


_CONFIGS: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
_COLUMN_EXPRESSION = """
SELECT pg_get_expr(d.adbin, d.adrelid)
FROM pg_attrdef AS d JOIN pg_attribute AS a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
WHERE d.adrelid = 'memory_facts'::regclass AND a.attname = 'search_vector'"""


class _RegConfigType(sa.types.UserDefinedType[Any]):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "regconfig"


class _TSQueryType(sa.types.UserDefinedType[Any]):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "tsquery"


class _TSVectorType(sa.types.UserDefinedType[Any]):
    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "tsvector"


_REGCONFIG = _RegConfigType()
_TSQUERY = _TSQueryType()
_TSVECTOR = _TSVectorType()


def _quoted_lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _quoted_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


FREQUENCY_CAP = 2_000
"""Live facts counted at most per term for its document frequency on PostgreSQL: terms more
common than that all weigh as one that common (the count stays a bounded index read)."""


def _pg_prefix(config: sa.ColumnElement[Any], term: str) -> sa.ColumnElement[Any]:
    return sa.func.to_tsquery(config, _quoted_lexeme(term) + ":*", type_=_TSQUERY)


def _pg_estimated_size() -> sa.ColumnElement[Any]:
    """The table's size as the planner last estimated it (-1 before its first analysis)."""
    pg_class = sa.table("pg_class", sa.column("oid"), sa.column("reltuples", sa.Float))
    own = pg_class.c.oid == sa.text("'memory_facts'::regclass")
    return sa.select(pg_class.c.reltuples).where(own).scalar_subquery()


def _pg_idf(
    config: sa.ColumnElement[Any], term: str, size: sa.ColumnElement[Any]
) -> sa.ColumnElement[Any]:
    """``term``'s inverse document frequency as BM25 weighs it, ``ln(1 + (N − n + 0.5) / (n +
    0.5))`` = ``ln((N + 1) / (n + 0.5))``: ``n`` the live facts it matches as a prefix, counted
    through the GIN index up to :data:`FREQUENCY_CAP`, ``N`` the table's estimated size (at
    least the cap, so at least ``n``). An uncorrelated subquery: PostgreSQL computes it once per
    search, in the search's own statement."""
    facts = sa.table("memory_facts", sa.column("valid_to"), sa.column("search_vector")).alias(
        "frequency"
    )
    vector = sa.literal_column("frequency.search_vector", _TSVECTOR)
    matching = (
        sa.select(sa.literal(1))
        .select_from(facts)
        .where(facts.c.valid_to.is_(None), vector.op("@@")(_pg_prefix(config, term)))
        .limit(FREQUENCY_CAP)
        .subquery()
    )
    count = sa.select(sa.func.count()).select_from(matching).scalar_subquery()
    total = sa.func.greatest(size, FREQUENCY_CAP)
    return sa.func.ln((total + 1.0) / (count + 0.5))
