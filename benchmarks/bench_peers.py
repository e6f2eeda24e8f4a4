"""memory_sql beside LangGraph's stores and the bare driver, on one PostgreSQL server and one disk.

    .venv/bin/python benchmarks/bench_peers.py [postgresql] [sqlite] [--idle-states] [--no-scale]
    .venv/bin/python benchmarks/bench_peers.py --before /tmp/base [postgresql] [sqlite]

(default: both databases; ``--no-scale`` leaves out the series of 10 … 100 000 memories; with
the CPUs kept out of deep idle states where the process may, see ``_common.steady_cpus``, unless
``--idle-states`` leaves them as they are).

It needs the bench extra (pip install -e '.[bench]'; `make bench` installs it).

``--before FOLDER`` (a checkout of the code before revision 0015, e.g. ``git worktree add
/tmp/base <commit>``) measures instead live-fact loads and saves of that code and of this one,
each on a database of its own, this one with 2 000 closed versions in the measured memory, in
alternating runs of ``_live_facts_probe.py``, and prints this ÷ before (goal: at most 1.1×).

The peers are used as their users use them. LangGraph's ``PostgresStore`` (on a
``psycopg_pool.ConnectionPool``) and ``SqliteStore`` hold one item per fact under the namespace
``(user, agent, "facts")``, keyed by the fact id, valued ``{"content", "category", "confidence",
"source_thread_id", "created_at"}``; for the contention figure, one JSON profile document per
user, read (``get``), extended and written back (``put``). The floor is the bare driver (psycopg 3
``Connection`` in autocommit, ``sqlite3``) running the one statement an operation cannot do
without, on memory_sql's own tables. Each side has its own fresh database: on PostgreSQL a
``CREATE DATABASE`` per side (dropped at the end), on SQLite a file per side in one temporary
folder; the floor shares memory_sql's.

Every figure is the median (and p90) of many calls after a warm-up, the three sides taking turns
round by round so that a slower minute of the shared server does not land on one side only. The
memory is 200 facts. Printed: one table per database, the durability each side runs with, the
goals memory_sql's storage is working towards (issue #32's, each "met" or "not met" beside its
ratio; informative), the same-user contention figures. The exit status is 1 only if memory_sql
lost an acknowledged update under contention.
"""

from __future__ import annotations

import gc
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    fmt,
    libpq_url,
    measured_source,
    percentile,
    released_together,
    scratch_postgres,
    steady_cpus,
    time_calls,
)

from memory_sql import Fact, MemoryDocument, VersionConflictError, migrations
from memory_sql.database import create_engine
from memory_sql.models import fact_digest
from memory_sql.ops import search_facts
from memory_sql.scope import Scope
from memory_sql.storage import SQLStorage, open_storage

try:
    import psycopg
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.sqlite import SqliteStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool
except ImportError as exc:
    sys.exit(f"bench_peers needs the bench extra (pip install -e '.[bench]'): {exc}")

AGENT = "coder"
USER = "bench-user"
FACTS = 200
THREADS = 8
THREAD_SAVES = 1000  # in all, over the THREADS threads
CONTENDED_SAVES = 25  # per thread, all on one user's memory
SCALE_STEPS = (10, 1_000, 10_000, 100_000)
SCALE_FACTS = 5  # facts per memory in the scale series (100 000 memories: 500 000 fact rows)
SCALE_CALLS, SCALE_WARMUP = 300, 20  # cold loads timed per size, after a warm-up
CATEGORIES = ["preference", "knowledge", "context", "behavior", "goal", "correction"]
WORDS = [
    *("prefers", "concise", "answers", "uses", "python", "postgres", "rust", "typescript"),
    *("works", "on", "data", "pipelines", "video", "creation", "lives", "in", "berlin"),
    *("likes", "tea", "hates", "meetings", "building", "agents", "喜欢", "简洁", "回答", "项目"),
]
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
MEMORY_SQL, LANGGRAPH, FLOOR = "memory_sql", "LangGraph", "floor"


# figures ---------------------------------------------------------------------------------------


@dataclass
class Figure:
    """A median and p90 of seconds per call, or (``rate``) a throughput in operations/s."""

    median: float
    p90: float | None = None
    rate: bool = False

    def __str__(self) -> str:
        if self.rate:
            return f"{self.median:,.0f}/s"
        return f"{fmt(self.median).strip()} ({fmt(self.p90 or 0).strip()})"


def figure(times: list[float]) -> Figure:
    return Figure(statistics.median(times), percentile(times, 90))


def settle() -> None:
    """Collect garbage now and exempt what survives, so that the set-up's objects are not
    walked again by collections inside a measurement."""
    gc.collect()
    gc.freeze()


def interleaved(
    sides: dict[str, Callable[[], object]],
    *,
    number: int,
    warmup: int = 20,
    rounds: int = 5,
    after: dict[str, Callable[[], object]] | None = None,
) -> dict[str, Figure]:
    """Each side's figure over ``number`` timed calls, the sides taking turns in ``rounds``."""
    after = after or {}
    times: dict[str, list[float]] = {name: [] for name in sides}
    settle()
    for name, run in sides.items():
        time_calls(run, number=warmup, after=after.get(name))
    for _ in range(rounds):
        for name, run in sides.items():
            times[name] += time_calls(run, number=number // rounds, after=after.get(name))
    return {name: figure(t) for name, t in times.items()}


def threaded(work: Callable[[int], Callable[[], None]], threads: int = THREADS) -> float:
    """:func:`_common.released_together` after a :func:`settle`."""
    settle()
    return released_together(work, threads)


# data ------------------------------------------------------------------------------------------


class Facts:
    """Fresh, distinct facts (casefold-unique contents), reproducibly random."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0

    def __call__(self, prefix: str = "fact") -> Fact:
        self.count += 1
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(6, 18)))
        return Fact(
            content=f"{text} ({prefix} {self.count})",
            category=self.rng.choice(CATEGORIES),
            confidence=round(self.rng.uniform(0.7, 1.0), 2),
            source_thread_id=f"thread-{self.rng.randint(1, 50)}",
        )

    def many(self, n: int, prefix: str = "fact") -> list[Fact]:
        return [self(prefix) for _ in range(n)]


def value_of(fact: Fact) -> dict[str, Any]:
    """A fact as a LangGraph item value."""
    return {
        "content": fact.content,
        "category": fact.category,
        "confidence": fact.confidence,
        "source_thread_id": fact.source_thread_id,
        "created_at": fact.created_at.isoformat(),
    }


def namespace(user: str, kind: str = "facts") -> tuple[str, str, str]:
    return (user, AGENT, kind)


# the floor: the bare driver on memory_sql's tables ----------------------------------------------

_FACT_COLUMNS = (
    "fact_id, content, category, confidence, source_thread_id, source_error, created_at, updated_at"
)
_SCOPE = "tenant_id = %s AND user_id = %s AND agent_name = %s"
FLOOR_SQL = {
    "pk": f"SELECT version, created_at, updated_at FROM memory_scopes WHERE {_SCOPE}",
    "one": "SELECT 1",
    # live facts, as memory_sql reads them (removed ones are kept closed: revision 0015)
    "facts": f"SELECT {_FACT_COLUMNS} FROM memory_facts WHERE {_SCOPE} AND valid_to IS NULL",
    "search": f"SELECT {_FACT_COLUMNS} FROM memory_facts WHERE {_SCOPE} AND valid_to IS NULL "
    "AND category = %s",
    "insert": "INSERT INTO memory_facts (tenant_id, user_id, agent_name, fact_id, content, "
    "content_key, category, confidence, source_thread_id, source_error, created_at, updated_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
    "delete": f"DELETE FROM memory_facts WHERE {_SCOPE} AND fact_id = %s",
    "update": "UPDATE memory_facts SET confidence = %s, updated_at = %s "
    f"WHERE {_SCOPE} AND fact_id = %s",
}


class Floor:
    """One bare-driver connection (autocommit) running :data:`FLOOR_SQL`."""

    def __init__(self, conn: Any, sqlite: bool) -> None:
        self.conn = conn
        self.sqlite = sqlite
        self.sql = {k: v.replace("%s", "?") if sqlite else v for k, v in FLOOR_SQL.items()}
        self.cur = conn.cursor()

    def _stamp(self) -> Any:
        now = datetime.now(timezone.utc)
        # How SQLAlchemy stores memory_sql's UTC timestamps in SQLite.
        return now.replace(tzinfo=None).isoformat(" ", "microseconds") if self.sqlite else now

    def pk(self, user: str = USER) -> Any:
        return self.cur.execute(self.sql["pk"], ("default", user, AGENT)).fetchone()

    def one(self) -> Any:
        return self.cur.execute(self.sql["one"]).fetchone()

    def facts(self, user: str = USER) -> list[Any]:
        return self.cur.execute(self.sql["facts"], ("default", user, AGENT)).fetchall()

    def search(self, category: str, user: str = USER) -> list[Any]:
        return self.cur.execute(self.sql["search"], ("default", user, AGENT, category)).fetchall()

    def insert(self, fact: Fact, user: str) -> None:
        now = self._stamp()
        row = ("default", user, AGENT, fact.id, fact.content, fact_digest(fact.content))
        row += (fact.category, fact.confidence, fact.source_thread_id, None, now, now)
        self.cur.execute(self.sql["insert"], row)

    def delete(self, fact_id: str, user: str) -> None:
        self.cur.execute(self.sql["delete"], ("default", user, AGENT, fact_id))

    def update(self, fact_id: str, confidence: float, user: str) -> None:
        params = (confidence, self._stamp(), "default", user, AGENT, fact_id)
        self.cur.execute(self.sql["update"], params)

    def close(self) -> None:
        self.conn.close()


# the two databases -----------------------------------------------------------------------------


class Backend:
    """Where the three sides of one database live, and how the scale series is built."""

    name: str
    key: str  # as named on the command line
    memory_url: str  # memory_sql's database (the floor's too)
    scale_series = True  # whether this run measures the scale series

    def langgraph(self, stack: ExitStack) -> Any:
        """LangGraph's store on its own fresh database, set up (``setup()``)."""
        raise NotImplementedError

    def floor(self) -> Floor:
        """A bare-driver connection to memory_sql's database."""
        raise NotImplementedError

    def durability(self, store: SQLStorage, lg: Any) -> list[str]:
        """What each side's commit survives, as configured in this run."""
        raise NotImplementedError

    def scratch(self, stack: ExitStack, name: str) -> str:
        """The URL of one more fresh database, for memory_sql (migrated by the caller)."""
        raise NotImplementedError

    def build_scale(self, url: str, memories: int) -> None:
        """``memories`` memories of :data:`SCALE_FACTS` facts each, by plain SQL inserts."""
        raise NotImplementedError

    def analyze(self, url: str) -> None:
        """Fresh planner statistics, so that autovacuum does not redo them mid-measurement."""


def langgraph_postgres(conninfo: str, stack: ExitStack) -> PostgresStore:
    """LangGraph's store as it documents one shared by threads: a pool of ``THREADS``
    connections in autocommit, closed with ``stack``."""
    pool = ConnectionPool(
        conninfo,
        min_size=THREADS,
        max_size=THREADS,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=False,
    )
    pool.open(wait=True)
    stack.callback(pool.close)
    store = PostgresStore(pool)
    store.setup()
    return store


class Postgres(Backend):
    name = "PostgreSQL"
    key = "postgresql"

    def __init__(self, stack: ExitStack) -> None:
        self.memory_url = self.scratch(stack, "memory_sql")
        self.langgraph_url = self.scratch(stack, "LangGraph")

    def scratch(self, stack: ExitStack, name: str) -> str:
        url = stack.enter_context(scratch_postgres())
        if url is None:
            raise ConnectionError("PostgreSQL unreachable")
        return url

    def langgraph(self, stack: ExitStack) -> PostgresStore:
        return langgraph_postgres(libpq_url(self.langgraph_url), stack)

    def floor(self) -> Floor:
        return Floor(psycopg.connect(libpq_url(self.memory_url), autocommit=True), sqlite=False)

    def durability(self, store: SQLStorage, lg: Any) -> list[str]:
        with psycopg.connect(libpq_url(self.memory_url), autocommit=True) as conn:
            shown = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method")
            }
        settings = ", ".join(f"{k}={v}" for k, v in shown.items() if k != "server_version")
        return [
            f"one server (PostgreSQL {shown['server_version']}, 127.0.0.1) for all sides: "
            f"{settings}",
            "memory_sql: its SQLAlchemy engine and pool; LangGraph: psycopg_pool.ConnectionPool"
            f" ({THREADS} connections, autocommit), each call one pipeline",
        ]

    def analyze(self, url: str) -> None:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("ANALYZE")

    def build_scale(self, url: str, memories: int) -> None:
        with psycopg.connect(libpq_url(url)) as conn:
            # The rows are consistent by construction: skip the per-row foreign-key triggers.
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(
                "INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version, created_at,"
                " updated_at) SELECT 'default', 'scale-' || lpad(i::text, 6, '0'), '', 1, now(),"
                " now() FROM generate_series(0, %s::int - 1) AS i",
                (memories,),
            )
            conn.execute(
                "INSERT INTO memory_facts (tenant_id, user_id, agent_name, fact_id, content,"
                " content_key, category, confidence, source_thread_id, source_error, created_at,"
                " updated_at) SELECT 'default', 'scale-' || lpad((i / %(per)s)::text, 6, '0'),"
                " '', 'fact_' || lpad(to_hex(i), 12, '0'),"
                " 'generated fact number ' || i || ' about the user',"
                " lpad(to_hex(i), 64, '0'), (%(categories)s::text[])[1 + i %% 6],"
                " (70 + i %% 30) / 100.0, 'thread-' || (i %% 50), NULL, now(), now()"
                " FROM generate_series(0, %(memories)s::int * %(per)s - 1) AS i",
                {"per": SCALE_FACTS, "memories": memories, "categories": CATEGORIES},
            )
        self.analyze(url)


class Sqlite(Backend):
    name = "SQLite, SqliteStore at its defaults"
    key = "sqlite"

    def __init__(self, stack: ExitStack) -> None:
        self.folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        self.memory_url = self.scratch(stack, "memory_sql")

    def scratch(self, stack: ExitStack, name: str) -> str:
        return f"sqlite:///{self.folder / name}.db"

    def langgraph(self, stack: ExitStack) -> SqliteStore:
        # SqliteStore takes one sqlite3 connection and serializes its users with a lock; threads
        # share the one store (from_conn_string opens it with check_same_thread=False).
        store = stack.enter_context(SqliteStore.from_conn_string(str(self.folder / "lg.db")))
        store.setup()
        return store

    def lg_pragmas(self) -> str:
        return "SQLite's defaults: it sets no pragma; an fsync at every commit"

    def _connect(self, url: str) -> sqlite3.Connection:
        path = url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA synchronous=NORMAL")  # as memory_sql's; the file is already WAL
        return conn

    def floor(self) -> Floor:
        return Floor(self._connect(self.memory_url), sqlite=True)

    def durability(self, store: SQLStorage, lg: Any) -> list[str]:
        with store.engine.connect() as conn:
            mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
        lg_mode = lg.conn.execute("PRAGMA journal_mode").fetchone()[0]
        lg_sync = lg.conn.execute("PRAGMA synchronous").fetchone()[0]
        return [
            f"SQLite {sqlite3.sqlite_version}, one file per side in {self.folder.parent}",
            f"memory_sql: journal_mode={mode}, synchronous={SYNCHRONOUS.get(sync, sync)} "
            "(a commit survives a process crash; the last ones can be lost to a power cut)",
            f"LangGraph SqliteStore: journal_mode={lg_mode}, "
            f"synchronous={SYNCHRONOUS.get(lg_sync, lg_sync)} ({self.lg_pragmas()})",
            "floor: memory_sql's file (WAL), synchronous=NORMAL",
        ]

    def build_scale(self, url: str, memories: int) -> None:
        now = datetime.now(timezone.utc).replace(tzinfo=None).isoformat(" ", "microseconds")
        conn = self._connect(url)  # foreign_keys is off: rows consistent anyway
        case = " ".join(f"WHEN {n} THEN '{c}'" for n, c in enumerate(CATEGORIES))
        try:
            conn.execute("BEGIN")
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n"
                " WHERE i + 1 < :memories) INSERT INTO memory_scopes (tenant_id, user_id,"
                " agent_name, version, created_at, updated_at)"
                " SELECT 'default', printf('scale-%06d', i), '', 1, :now, :now FROM n",
                {"memories": memories, "now": now},
            )
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n"
                " WHERE i + 1 < :memories * :per) INSERT INTO memory_facts (tenant_id, user_id,"
                " agent_name, fact_id, content, content_key, category, confidence,"
                " source_thread_id, source_error, created_at, updated_at)"
                " SELECT 'default', printf('scale-%06d', i / :per), '', printf('fact_%012x', i),"
                " 'generated fact number ' || i || ' about the user', printf('%064x', i),"
                f" CASE i % 6 {case} END, (70 + i % 30) / 100.0, 'thread-' || (i % 50), NULL,"
                " :now, :now FROM n",
                {"memories": memories, "per": SCALE_FACTS, "now": now},
            )
            conn.execute("COMMIT")
        finally:
            conn.close()


class SqliteEqual(Sqlite):
    """SQLite again, with ``SqliteStore`` at memory_sql's pragmas (``memory_sql/database.py``:
    WAL, ``synchronous=NORMAL``): the durability memory_sql runs with, on both sides. The scale
    series, memory_sql's alone, is not measured twice."""

    name = "SQLite, SqliteStore at memory_sql's pragmas (WAL, synchronous=NORMAL)"
    scale_series = False

    def langgraph(self, stack: ExitStack) -> SqliteStore:
        store = stack.enter_context(SqliteStore.from_conn_string(str(self.folder / "lg.db")))
        store.conn.execute("PRAGMA journal_mode=WAL")
        store.conn.execute("PRAGMA synchronous=NORMAL")
        store.setup()
        return store

    def lg_pragmas(self) -> str:
        return "set here as memory_sql sets them: a commit survives a process crash"


# the measurements ------------------------------------------------------------------------------


def memory_store(url: str) -> SQLStorage:
    engine = create_engine(url)
    migrations.upgrade(engine)
    engine.dispose()
    store = open_storage(url)
    assert isinstance(store, SQLStorage)
    return store


def seed(store: SQLStorage, lg: Any, users: list[str], facts: Facts) -> None:
    """The same 200 facts for each user on both sides."""
    for user in users:
        batch = facts.many(FACTS)
        store.save(MemoryDocument(facts=batch), user_id=user, agent_name=AGENT)
        lg.batch([PutOp(namespace(user), f.id, value_of(f)) for f in batch])


Row = tuple[str, dict[str, Figure]]


def single_thread_rows(store: SQLStorage, lg: Any, floor: Floor, facts: Facts) -> list[Row]:
    ns = namespace(USER)
    load = lambda: store.load(user_id=USER, agent_name=AGENT)  # noqa: E731
    lg_all = lambda: lg.search(ns, limit=1000)  # noqa: E731
    assert len(load().facts) == len(lg_all()) == len(floor.facts()) == FACTS
    rows: list[Row] = []

    cached = interleaved({MEMORY_SQL: load, LANGGRAPH: lg_all, FLOOR: floor.pk}, number=400)
    rows.append(("load unchanged memory (cached)", cached))
    rows.append(("  floor: SELECT 1", interleaved({FLOOR: floor.one}, number=400)))
    # What a cached load must copy whatever the database: the document handed out shares
    # nothing with the cache (its clone).
    (_, kept) = store._cache.latest(Scope.of(user_id=USER, agent_name=AGENT))
    rows.append(
        ("  of which the copy handed out", interleaved({MEMORY_SQL: kept.clone}, number=400))
    )

    clear = store._cache.clear
    cold = interleaved(
        {MEMORY_SQL: load, LANGGRAPH: lg_all, FLOOR: floor.facts},
        number=200,
        after={MEMORY_SQL: clear},
    )
    rows.append(("cold load, 200 facts", cold))

    # add one fact, then take it out again (untimed) so the memory stays at 200 facts
    added: dict[str, Fact] = {}

    def ms_add() -> None:
        doc = load()
        doc.facts.append(added.setdefault(MEMORY_SQL, facts("added")))
        store.save(doc, user_id=USER, agent_name=AGENT)

    def ms_undo() -> None:
        gone = added.pop(MEMORY_SQL).id
        doc = load()
        doc.facts = [f for f in doc.facts if f.id != gone]
        store.save(doc, user_id=USER, agent_name=AGENT)

    def lg_add() -> None:
        fact = added.setdefault(LANGGRAPH, facts("added"))
        lg.put(ns, fact.id, value_of(fact))

    def floor_add() -> None:
        floor.insert(added.setdefault(FLOOR, facts("added")), "floor-w")

    add = interleaved(
        {MEMORY_SQL: ms_add, LANGGRAPH: lg_add, FLOOR: floor_add},
        number=150,
        after={
            MEMORY_SQL: ms_undo,
            LANGGRAPH: lambda: lg.delete(ns, added.pop(LANGGRAPH).id),
            FLOOR: lambda: floor.delete(added.pop(FLOOR).id, "floor-w"),
        },
    )
    rows.append(("add one fact", add))
    assert len(load().facts) == len(lg_all()) == FACTS

    # update one fact's confidence, a different fact each time
    turn = dict.fromkeys((MEMORY_SQL, LANGGRAPH, FLOOR), 0)
    lg_values = {item.key: item.value for item in lg_all()}
    lg_keys = sorted(lg_values)
    floor_ids = [row[0] for row in floor.facts("floor-w")]

    def toggled(confidence: float) -> float:
        return 0.55 if confidence != 0.55 else 0.65

    def ms_update() -> None:
        doc = load()
        i = turn[MEMORY_SQL] = (turn[MEMORY_SQL] + 1) % len(doc.facts)
        doc.facts[i] = doc.facts[i].replace(confidence=toggled(doc.facts[i].confidence))
        store.save(doc, user_id=USER, agent_name=AGENT)

    def lg_update() -> None:
        turn[LANGGRAPH] = (turn[LANGGRAPH] + 1) % len(lg_keys)
        key = lg_keys[turn[LANGGRAPH]]
        value = {**lg_values[key], "confidence": toggled(lg_values[key]["confidence"])}
        lg.put(ns, key, value)
        lg_values[key] = value

    def floor_update() -> None:
        turn[FLOOR] = (turn[FLOOR] + 1) % len(floor_ids)
        floor.update(floor_ids[turn[FLOOR]], 0.55 + 0.1 * (turn[FLOOR] % 2), "floor-w")

    update = interleaved(
        {MEMORY_SQL: ms_update, LANGGRAPH: lg_update, FLOOR: floor_update}, number=150
    )
    rows.append(("update one fact's confidence", update))

    # search one memory's facts by category (every match: LangGraph's default limit is 10)
    category = dict.fromkeys((MEMORY_SQL, LANGGRAPH, FLOOR), 0)

    def next_category(side: str) -> str:
        category[side] += 1
        return CATEGORIES[category[side] % len(CATEGORIES)]

    def ms_search() -> list[Any]:
        return search_facts(
            store.engine,
            category=next_category(MEMORY_SQL),
            tenant_id="default",
            user_id=USER,
            agent_name=AGENT,
            limit=None,
        )

    def lg_search() -> list[Any]:
        return lg.search(ns, filter={"category": next_category(LANGGRAPH)}, limit=1000)

    for _ in CATEGORIES:
        found = len(ms_search()), len(lg_search()), len(floor.search(next_category(FLOOR)))
        assert found[0] == found[1] == found[2], found
    search = interleaved(
        {
            MEMORY_SQL: ms_search,
            LANGGRAPH: lg_search,
            FLOOR: lambda: floor.search(next_category(FLOOR)),
        },
        number=300,
    )
    rows.append(("search facts by category (~33 of 200)", search))
    return rows


def threads_row(
    store: SQLStorage, lg: Any, backend: Backend, facts: Facts, users: list[str]
) -> Row:
    """Saves/s of THREADS threads, each on its own user (THREAD_SAVES in all)."""
    per = THREAD_SAVES // THREADS

    def ms_work(t: int) -> Callable[[], None]:
        user, mine = users[t], facts.many(per + 5, "threaded")

        def one(fact: Fact) -> None:
            doc = store.load(user_id=user, agent_name=AGENT)
            doc.facts.append(fact)
            store.save(doc, user_id=user, agent_name=AGENT)

        for fact in mine[:5]:
            one(fact)
        return lambda: [one(f) for f in mine[5:]] and None

    def lg_work(t: int) -> Callable[[], None]:
        ns, mine = namespace(users[t]), facts.many(per + 5, "threaded")
        for fact in mine[:5]:
            lg.put(ns, fact.id, value_of(fact))
        return lambda: [lg.put(ns, f.id, value_of(f)) for f in mine[5:]] and None

    floors: list[Floor] = []

    def floor_work(t: int) -> Callable[[], None]:
        floor = backend.floor()
        floors.append(floor)
        user, mine = f"floor-t{t}", facts.many(per + 5, "threaded")
        for fact in mine[:5]:
            floor.insert(fact, user)
        return lambda: [floor.insert(f, user) for f in mine[5:]] and None

    rates = {}
    for name, work in ((MEMORY_SQL, ms_work), (LANGGRAPH, lg_work), (FLOOR, floor_work)):
        rates[name] = Figure(per * THREADS / threaded(work), rate=True)
    for floor in floors:
        floor.close()
    for user in users:
        assert len(store.load(user_id=user, agent_name=AGENT).facts) == FACTS + per + 5
    return (f"saves/s, {THREADS} threads, distinct users", rates)


@dataclass
class Contention:
    acknowledged: int
    present: int
    seconds: float
    conflicts: int = 0
    lost_ids: int = 0

    @property
    def lost(self) -> int:
        return self.acknowledged - self.present


def contention(store: SQLStorage, lg: Any, floor: Floor, facts: Facts) -> dict[str, Contention]:
    """THREADS threads adding facts to one user's memory; memory_sql retrying on conflicts,
    LangGraph reading, extending and writing back one profile document."""
    user = "contended"
    store.save(MemoryDocument(facts=facts.many(FACTS)), user_id=user, agent_name=AGENT)
    profile_ns = namespace(user, "profile")
    lg.put(profile_ns, "profile", {"facts": [value_of(f) for f in facts.many(FACTS)]})
    acknowledged: list[str] = []
    conflicts = [0]
    lock = threading.Lock()

    def ms_work(t: int) -> Callable[[], None]:
        mine = facts.many(CONTENDED_SAVES, "contended")

        def run() -> None:
            for fact in mine:
                while True:
                    doc = store.load(user_id=user, agent_name=AGENT)
                    doc.facts.append(fact)
                    try:
                        store.save(doc, user_id=user, agent_name=AGENT)
                    except VersionConflictError:
                        with lock:
                            conflicts[0] += 1
                        continue
                    with lock:
                        acknowledged.append(fact.id)
                    break

        return run

    seconds = threaded(ms_work)
    stored = {row[0] for row in floor.facts(user)}  # what the database holds, not the cache
    store._cache.clear()
    loaded = {f.id for f in store.load(user_id=user, agent_name=AGENT).facts}
    assert loaded == stored, "memory_sql load disagrees with the rows"
    results = {
        MEMORY_SQL: Contention(
            len(acknowledged),
            len(stored) - FACTS,
            seconds,
            conflicts[0],
            lost_ids=len(set(acknowledged) - stored),
        )
    }

    puts = [0]

    def lg_work(t: int) -> Callable[[], None]:
        mine = facts.many(CONTENDED_SAVES, "contended")

        def run() -> None:
            for fact in mine:
                profile = lg.get(profile_ns, "profile").value
                profile = {**profile, "facts": [*profile["facts"], value_of(fact)]}
                lg.put(profile_ns, "profile", profile)
                with lock:
                    puts[0] += 1

        return run

    seconds = threaded(lg_work)
    present = len(lg.get(profile_ns, "profile").value["facts"]) - FACTS
    results[LANGGRAPH] = Contention(puts[0], present, seconds)
    return results


def scale_rows(backend: Backend, stack: ExitStack) -> list[Row]:
    """Cold and cached loads of random memories among 10 … 100 000 stored: one fresh database
    per size, the sizes taking turns round by round.

    "Cold" is memory_sql's cache cleared before each load. The memories a size's cold loads
    will read are read once beforehand (untimed), so that every size is timed with those pages
    in the database's buffers: the series shows what the size of the tables costs a load
    (index depth, plans), not whether the largest database fits the server's buffer cache
    (PostgreSQL's 128 MB default here, shared by the four sizes)."""
    rng = random.Random(11)
    cold: dict[str, Callable[[], object]] = {}
    cached: dict[str, Callable[[], object]] = {}
    clear: dict[str, Callable[[], object]] = {}
    for memories in SCALE_STEPS:
        url = backend.scratch(stack, f"scale-{memories}")
        store = memory_store(url)
        stack.callback(store.close)
        backend.build_scale(url, memories)
        randoms = [f"scale-{rng.randrange(memories):06d}" for _ in range(10_000)]
        hot = randoms[:50]  # a working set the cache holds

        def load(users: list[str], store: SQLStorage = store) -> Callable[[], object]:
            turn = iter(users * 100)
            return lambda: store.load(user_id=next(turn))

        assert len(load(randoms)().facts) == SCALE_FACTS
        ahead = load(randoms)
        for _ in range(SCALE_WARMUP + SCALE_CALLS):
            ahead()
        cold[f"{memories:,}"] = load(randoms)
        clear[f"{memories:,}"] = store._cache.clear
        cached[f"{memories:,}"] = load(hot)
    cold_figures = interleaved(cold, number=SCALE_CALLS, warmup=SCALE_WARMUP, after=clear)
    cached_figures = interleaved(cached, number=300, warmup=100)
    rows: list[Row] = []
    for size in cold:
        rows.append((f"cold load, {size:>7} memories stored", {MEMORY_SQL: cold_figures[size]}))
        rows.append((f"cached load, {size:>7} memories", {MEMORY_SQL: cached_figures[size]}))
    return rows


# report ----------------------------------------------------------------------------------------


def ratio(a: Figure | None, b: Figure | None) -> str:
    if a is None or b is None:
        return "—"
    return f"{a.median / b.median:.2f}x"


def print_table(title: str, rows: list[Row]) -> None:
    head = f"{'operation':40} {MEMORY_SQL:>20} {LANGGRAPH:>20} {FLOOR:>20} "
    head += f"{'memory_sql/LangGraph':>21} {'memory_sql/floor':>17}"
    print(f"\n{title}: median (p90) per call")
    print(head)
    print("-" * len(head))
    for label, cells in rows:
        line = f"{label:40}"
        for side in (MEMORY_SQL, LANGGRAPH, FLOOR):
            line += f" {str(cells[side]) if side in cells else '—':>20}"
        line += f" {ratio(cells.get(MEMORY_SQL), cells.get(LANGGRAPH)):>21}"
        line += f" {ratio(cells.get(MEMORY_SQL), cells.get(FLOOR)):>17}"
        print(line)


GOALS = {
    # operation: (PostgreSQL, SQLite) goal of memory_sql ÷ the other side (issue #32's column)
    "load unchanged memory (cached)": (1.5, 2.0),
    "cold load, 200 facts": (2.0, 2.0),
    "add one fact": (1.3, 2.0),
    "update one fact's confidence": (1.3, 2.0),
}


def goals(
    rows: dict[str, dict[str, Figure]], scale: list[Row], sqlite: bool = False
) -> list[tuple[bool, str]]:
    """Each goal (issue #32's, on PostgreSQL and SQLite) next to its ratio in this run."""

    def against(op: str, other: str, what: str) -> tuple[bool, str]:
        limit = GOALS[op][sqlite]
        mine, theirs = rows[op][MEMORY_SQL], rows[op][other]
        r = mine.median / theirs.median
        shown = f"{fmt(mine.median).strip()} vs {fmt(theirs.median).strip()}"
        return r <= limit, f"{what}: {shown} = {r:.2f}x (goal ≤ {limit:g}x)"

    saves = rows[f"saves/s, {THREADS} threads, distinct users"]
    ms_rate, lg_rate = saves[MEMORY_SQL].median, saves[LANGGRAPH].median
    out = [
        against("load unchanged memory (cached)", FLOOR, "cached load ÷ the bare PK lookup"),
        against("cold load, 200 facts", FLOOR, "cold load ÷ the bare 200-row select"),
        against("add one fact", LANGGRAPH, "add one fact ÷ LangGraph put"),
        against("update one fact's confidence", LANGGRAPH, "update ÷ LangGraph put"),
        (
            ms_rate >= lg_rate,
            f"saves/s with {THREADS} threads ÷ LangGraph's: {ms_rate:,.0f}/s vs {lg_rate:,.0f}/s"
            f" = {ms_rate / lg_rate:.2f}x (goal ≥ 1x)",
        ),
        (
            (search := rows["search facts by category (~33 of 200)"])[MEMORY_SQL].median
            <= search[LANGGRAPH].median,
            "search ÷ LangGraph search: "
            f"{search[MEMORY_SQL].median / search[LANGGRAPH].median:.2f}x (goal ≤ 1x)",
        ),
    ]
    for kind in ("cold", "cached") if scale else ():
        series = [cells[MEMORY_SQL].median for label, cells in scale if label.startswith(kind)]
        r = series[-1] / series[0]
        out.append(
            (
                r <= 1.2,
                f"scale, {kind} load with {SCALE_STEPS[-1]:,} memories / with "
                f"{SCALE_STEPS[0]}: {fmt(series[-1]).strip()} vs {fmt(series[0]).strip()} = "
                f"{r:.2f}x (goal ≤ 1.2x)",
            )
        )
    return out


def run_backend(backend: Backend, stack: ExitStack) -> tuple[bool, dict[str, dict[str, Figure]]]:
    """Measures and prints one database; False if memory_sql lost an update; the rows."""
    started = time.perf_counter()
    facts = Facts(42)
    store = memory_store(backend.memory_url)
    stack.callback(store.close)
    lg = backend.langgraph(stack)
    users = [USER, "floor-w"] + [f"thread-{t}" for t in range(THREADS)]
    users += [f"floor-t{t}" for t in range(THREADS)]
    seed(store, lg, users, facts)
    for url in (backend.memory_url, getattr(backend, "langgraph_url", None)):
        if url is not None:
            backend.analyze(url)
    floor = backend.floor()
    stack.callback(floor.close)

    rows = single_thread_rows(store, lg, floor, facts)
    rows.append(threads_row(store, lg, backend, facts, [f"thread-{t}" for t in range(THREADS)]))
    contended = contention(store, lg, floor, facts)
    scale = (
        scale_rows(backend, stack) if backend.scale_series and "--no-scale" not in sys.argv else []
    )

    print_table(backend.name, rows + scale)
    print("  ratios are of times (< 1: memory_sql faster); on the saves/s row, of rates (> 1)")
    for kind in ("cold", "cached") if scale else ():
        series = [cells[MEMORY_SQL].median for label, cells in scale if label.startswith(kind)]
        print(f"  scale, {kind} load: largest/smallest = {series[-1] / series[0]:.2f}x")
    print(
        f"\n{backend.name}: same-user contention, {THREADS} threads x {CONTENDED_SAVES} adds to"
        f" one memory of {FACTS} facts"
    )
    ms, lgc = contended[MEMORY_SQL], contended[LANGGRAPH]
    per_save = ms.conflicts / max(ms.acknowledged, 1)
    print(
        f"  memory_sql (load, add, save; reload and re-apply on VersionConflictError):"
        f" {ms.acknowledged} saves acknowledged, {ms.present} facts present, lost updates"
        f" {ms.lost} ({ms.lost_ids} acknowledged ids missing), {per_save:.2f} conflicts per"
        f" save, {ms.acknowledged / ms.seconds:,.0f} saves/s"
    )
    print(
        f"  LangGraph (get, append to a list, put one profile document):"
        f" {lgc.acknowledged} puts acknowledged, {lgc.present} facts present, lost"
        f" {lgc.lost} ({100 * lgc.lost / max(lgc.acknowledged, 1):.1f}%),"
        f" {lgc.acknowledged / lgc.seconds:,.0f} puts/s"
    )
    threads_note = (
        f"one PostgresStore on a ConnectionPool of {THREADS} shared by the threads (every"
        " call holds the store's one lock, so the threads' calls run one at a time)"
        if backend.key == "postgresql"
        else "one SqliteStore (its single connection, check_same_thread=False) shared by"
        " the threads"
    )
    print(
        f"  threads: memory_sql one SQLStorage shared; LangGraph {threads_note};"
        f" floor one bare connection per thread"
    )
    print(f"\n{backend.name}: durability")
    for line in backend.durability(store, lg):
        print(f"  {line}")
    print(f"\n{backend.name}: goals (issue #32; targets, not failures)")
    table = dict(rows)
    for ok, text in goals(table, scale, sqlite=backend.key == "sqlite"):
        print(f"  {'met    ' if ok else 'not met'}  {text}")
    print(f"  ({backend.name} measured in {time.perf_counter() - started:.0f} s)")
    return ms.lost == 0 and ms.lost_ids == 0, table


EQUAL_ROWS = (
    "add one fact",
    "update one fact's confidence",
    "search facts by category (~33 of 200)",
    "cold load, 200 facts",
    f"saves/s, {THREADS} threads, distinct users",
)


def print_durability_comparison(
    defaults: dict[str, dict[str, Figure]], equal: dict[str, dict[str, Figure]]
) -> None:
    """memory_sql against SqliteStore at its defaults and at memory_sql's pragmas, side by side
    (each ratio within its own run: the two runs' memory_sql figures are not mixed)."""
    print("\nSQLite: memory_sql ÷ SqliteStore, at SqliteStore's defaults and at equal durability")
    head = (
        f"{'operation':40} {'LG defaults':>14} {'LG WAL+NORMAL':>14} {'ms ÷ LG default':>16}"
        f" {'ms ÷ LG equal':>14} {'LG equal ÷ default':>19}"
    )
    print(head)
    print("-" * len(head))
    for label in EQUAL_ROWS:
        if label not in defaults or label not in equal:
            continue
        d, e = defaults[label], equal[label]
        line = f"{label:40} {str(d[LANGGRAPH]):>14} {str(e[LANGGRAPH]):>14}"
        line += (
            f" {ratio(d[MEMORY_SQL], d[LANGGRAPH]):>16} {ratio(e[MEMORY_SQL], e[LANGGRAPH]):>14}"
        )
        line += f" {ratio(e[LANGGRAPH], d[LANGGRAPH]):>19}"
        print(line)
    print("  ratios of times (< 1: the first faster); on the saves/s row, of rates (> 1)")


def main() -> int:
    print(
        f"memory_sql vs LangGraph stores vs the bare driver: a memory of {FACTS} facts,"
        f" {THREADS} threads for the concurrent figures; {os.cpu_count()} CPUs, load average"
        f" {os.getloadavg()[0]:.2f} at the start"
    )
    print(f"memory_sql measured: {measured_source()}")
    correct = True
    if "--before" in sys.argv:
        return versus_before(sys.argv[sys.argv.index("--before") + 1], sys.argv[1:])
    args = {arg.lower() for arg in sys.argv[1:]}  # e.g. `bench_peers.py sqlite`
    only = args - {"--idle-states", "--no-scale"}
    tables: dict[type[Backend], dict[str, dict[str, Figure]]] = {}
    with ExitStack() as run:
        print(run.enter_context(steady_cpus(hold="--idle-states" not in args)))
        for make in (Postgres, Sqlite, SqliteEqual):
            if only and make.key not in only:
                continue
            ok, table = run_one(make)
            correct &= ok
            if table:
                tables[make] = table
    if Sqlite in tables and SqliteEqual in tables:
        print_durability_comparison(tables[Sqlite], tables[SqliteEqual])
    if not correct:
        print("\nFAILED: memory_sql lost an acknowledged update under same-user contention")
        return 1
    return 0


CLOSED_VERSIONS = 2000
BEFORE_ROUNDS = 5


def versus_before(before: str, args: list[str]) -> int:
    """``--before``: see the module docstring."""
    import json
    import subprocess

    probe = Path(__file__).resolve().parent / "_live_facts_probe.py"
    here = str(Path(__file__).resolve().parent.parent)
    kinds = [k for k in ("postgresql", "sqlite") if k in args] or ["postgresql", "sqlite"]
    print(f"live-fact loads and saves: this code ({here}) ÷ the code before 0015 ({before})")
    for kind in kinds:
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for _ in range(BEFORE_ROUNDS):
            for side, path, closed in (("before", before, 0), ("after", here, CLOSED_VERSIONS)):
                env = {**os.environ, "PYTHONPATH": path}
                done = subprocess.run(
                    [sys.executable, str(probe), kind, str(closed)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
        if "skipped" in runs["after"][0]:
            print(f"\n{kind}: skipped")
            continue
        print(f"\n{kind}: median of {BEFORE_ROUNDS} alternating runs, each the median of 300 calls")
        print(f"| operation | before 0015 | after ({CLOSED_VERSIONS} closed versions) | ratio |")
        print("| --- | --- | --- | --- |")
        for name in runs["before"][0]:
            old = statistics.median(r[name] for r in runs["before"])
            new = statistics.median(r[name] for r in runs["after"])
            verdict = "PASS" if new / old <= 1.1 else "FAIL"
            print(f"| {name} | {fmt(old)} | {fmt(new)} | {new / old:.2f}× {verdict} |")
    return 0


def run_one(make: type[Backend]) -> tuple[bool, dict[str, dict[str, Figure]]]:
    with ExitStack() as stack:
        try:
            backend = make(stack)
        except ConnectionError as exc:
            print(f"\n{make.name}: skipped ({exc})")
            return True, {}
        return run_backend(backend, stack)


if __name__ == "__main__":
    sys.exit(main())
