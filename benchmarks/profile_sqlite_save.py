"""Where a SQLite add costs what: memory_sql's save taken apart, statement by statement, at
memory_sql's own pragmas (``memory_sql/database.py``: WAL, ``synchronous=NORMAL``,
``foreign_keys=ON``, a busy timeout), beside LangGraph's ``SqliteStore.put`` at the same pragmas.

    .venv/bin/python benchmarks/profile_sqlite_save.py [--rounds N] [--alternatives]

1. The statements of one add (load, append, save) through ``SQLStorage``, as SQLite runs them
   (``sqlite3``'s trace callback on the engine's connections): how many, which.
2. The same statements replayed by the bare driver in one ``BEGIN IMMEDIATE`` transaction, one
   more each step, so that each step's difference is what that statement (or guarantee) adds:
   the transaction and its commit, the version claim, the fact row (and its full-text index
   rows, by the same insert on a copy of the file without the FTS5 triggers), the event row.
3. What is left of a whole add beyond those statements: memory_sql's Python (the diff, the
   cache's copies, the parameters).
4. An update of one fact's confidence the same way: through ``SQLStorage``, its statements
   replayed bare (the transaction, the version claim, the fact's row, its event row), beside
   ``SqliteStore.put`` of a key it holds already (an upsert, as ``bench_peers.py``'s update).

``--alternatives`` measures instead the bare save on copies of one database changed in one
way each, at equal durability, against the schema head: FTS5 ``automerge`` 16 or 0 (4 by
default), a page size of 1 024 or 8 192 (4 096), ``cache_size`` 16 MB, ``mmap_size`` 256 MB,
``wal_autocheckpoint`` 10 000 pages (1 000), and the events' table ``WITHOUT ROWID``: what each
would save an add (docs/write-path.md says why none was taken); a second unaltered copy shows
how far two equal files differ.

Every variant takes turns round by round; medians (and p90). Ratios against ``SqliteStore.put``
measured in the same run. The bench extra is needed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sqlalchemy as sa
from _common import fmt, measured_source, percentile

from memory_sql import Fact, MemoryDocument, MemoryStorage, migrations, open_storage
from memory_sql.database import SQLITE_BUSY_TIMEOUT_SECONDS, create_engine
from memory_sql.models import fact_digest
from memory_sql.text_search import search_text

try:
    from langgraph.store.sqlite import SqliteStore
except ImportError:  # pragma: no cover
    sys.exit("needs the bench extra: pip install -e '.[bench]'")

USER, AGENT = "profiled", "coder"
REPLAYED = "replayed"  # the bare replay's own memory, beside memory_sql's
FACTS = 200


def pragmas(conn: sqlite3.Connection) -> sqlite3.Connection:
    """memory_sql's connection settings (memory_sql/database.py)."""
    conn.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def stamp() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(" ", "microseconds")


def new_fact(n: int) -> Fact:
    return Fact(content=f"profiled fact {n} {uuid.uuid4().hex}", category="context", confidence=0.9)


def seeded(url: str) -> MemoryStorage:
    """A database at the schema head holding the profiled memory and the replayed one, each of
    ``FACTS`` facts; its storage."""
    migrations.upgrade(url)
    storage = open_storage(url)
    for user in (USER, REPLAYED):
        storage.save(
            MemoryDocument(facts=[new_fact(n) for n in range(FACTS)]),
            user_id=user,
            agent_name=AGENT,
            expected_version=0,
        )
    return storage


def trace_one_add(url: str) -> list[str]:
    """The statements SQLite runs for one add through SQLStorage (a warm cache)."""
    engine = create_engine(url)
    seen: list[str] = []
    tracing = [False]

    def traced(statement: str) -> None:
        if tracing[0]:
            seen.append(" ".join(statement.split()))

    @sa.event.listens_for(engine, "connect")
    def _trace(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.set_trace_callback(traced)

    storage = open_storage(engine)
    try:
        doc = storage.load(user_id=USER, agent_name=AGENT)
        doc.facts.append(new_fact(-1))
        storage.save(doc, user_id=USER, agent_name=AGENT, expected_version=doc.version)
        tracing[0] = True
        doc = storage.load(user_id=USER, agent_name=AGENT)
        doc.facts.append(new_fact(-2))
        storage.save(doc, user_id=USER, agent_name=AGENT, expected_version=doc.version)
        tracing[0] = False
    finally:
        storage.close()
        engine.dispose()
    return seen


class Replay:
    """The save's statements on a bare ``sqlite3`` connection to ``path``."""

    def __init__(self, path: Path, user: str = REPLAYED) -> None:
        self.user = user
        self.conn = pragmas(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
        self.version = self.conn.execute(
            "SELECT version FROM memory_scopes WHERE user_id = ? AND agent_name = ?",
            (self.user, AGENT),
        ).fetchone()[0]
        self.created_at = self.conn.execute(
            "SELECT created_at FROM memory_scopes WHERE user_id = ? AND agent_name = ?",
            (self.user, AGENT),
        ).fetchone()[0]
        self.n = 0

    def read(self) -> None:
        """The cached load's check: one primary-key read of the version."""
        self.conn.execute(
            "SELECT version, created_at FROM memory_scopes"
            " WHERE tenant_id = 'default' AND user_id = ? AND agent_name = ?",
            (self.user, AGENT),
        ).fetchone()

    def claim(self, now: str) -> None:
        """The version claim on the scope row (in the caller's transaction)."""
        row = self.conn.execute(
            "UPDATE memory_scopes SET version = version + 1, updated_at = ?"
            " WHERE tenant_id = 'default' AND user_id = ? AND agent_name = ?"
            " AND version = ? AND created_at = ? RETURNING version",
            (now, self.user, AGENT, self.version, self.created_at),
        ).fetchone()
        assert row is not None
        self.version += 1

    def save(self, *, claim: bool, fact: bool, event: bool) -> None:
        c = self.conn
        now = stamp()
        c.execute("BEGIN IMMEDIATE")
        if claim:
            self.claim(now)
        self.n += 1
        fact_id = f"fact_{uuid.uuid4().hex[:12]}"
        content = f"replayed fact {self.n} {uuid.uuid4().hex}"
        if fact:
            c.execute(
                "INSERT INTO memory_facts (tenant_id, user_id, agent_name, fact_id, content,"
                " content_key, search_text, category, confidence, source_thread_id,"
                " source_error, created_at, updated_at)"
                " VALUES ('default', ?, ?, ?, ?, ?, ?, 'context', 0.9, NULL, NULL, ?, ?)",
                (
                    self.user,
                    AGENT,
                    fact_id,
                    content,
                    fact_digest(content),
                    search_text(content),
                    now,
                    now,
                ),
            )
        if event:
            c.execute(
                "INSERT INTO memory_fact_events (tenant_id, user_id, agent_name, version,"
                " fact_id, event, category, confidence, occurred_at)"
                " VALUES ('default', ?, ?, ?, ?, 'added', 'context', 0.9, ?)",
                (self.user, AGENT, self.version, fact_id, now),
            )
        c.execute("COMMIT")

    def update(self, fact_id: str, content: str, confidence: float) -> None:
        """An update's statements: one fact's confidence, as ``SQLStorage`` writes it."""
        c = self.conn
        now = stamp()
        c.execute("BEGIN IMMEDIATE")
        self.claim(now)
        c.execute(
            "UPDATE memory_facts SET confidence = ?, updated_at = ? WHERE tenant_id = 'default'"
            " AND user_id = ? AND agent_name = ? AND fact_id = ?",
            (confidence, now, self.user, AGENT, fact_id),
        )
        c.execute(
            "INSERT INTO memory_fact_events (tenant_id, user_id, agent_name, version, fact_id,"
            " event, category, confidence, occurred_at, content_before, content_after,"
            " superseded_by) VALUES ('default', ?, ?, ?, ?, 'updated', 'context', ?, ?, NULL, ?,"
            " NULL)",
            (self.user, AGENT, self.version, fact_id, confidence, now, content),
        )
        c.execute("COMMIT")


def without(path: Path, copy: Path, *, indexes: bool) -> Path:
    """A copy of the database at ``path`` without the facts' FTS5 triggers (and, with
    ``indexes``, without the secondary indexes of the facts and events: those not behind a
    primary key or a unique constraint)."""
    shutil.copy(path, copy)
    conn = sqlite3.connect(copy)
    kinds = ("trigger", "index") if indexes else ("trigger",)
    dropped = conn.execute(
        "SELECT type, name FROM sqlite_master WHERE tbl_name IN ('memory_facts',"
        " 'memory_fact_events') AND name NOT LIKE 'sqlite_autoindex%' AND type IN"
        f" ({', '.join('?' for _ in kinds)})",
        kinds,
    ).fetchall()
    for kind, name in dropped:
        conn.execute(f'DROP {kind.upper()} "{name}"')
    conn.commit()
    conn.close()
    return copy


def measure(
    variants: dict[str, Callable[[], object]],
    rounds: int,
    after: dict[str, Callable[[], object]] | None = None,
) -> dict[str, list[float]]:
    """Each variant ``rounds`` times, taking turns; ``after[name]`` (untimed) follows each call."""
    after = after or {}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds // 10):  # warm-up
        for name, run in variants.items():
            run()
            after.get(name, lambda: None)()
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
            after.get(name, lambda: None)()
    return times


def shown(times: dict[str, list[float]], baseline: str, title: str) -> dict[str, float]:
    """Print ``title`` and each variant's median (p90) and its ratio to ``baseline``'s median;
    the medians."""
    med = {name: percentile(t, 50) for name, t in times.items()}
    print(title)
    for name, t in times.items():
        print(
            f"   {name:42} {fmt(med[name])} ({fmt(percentile(t, 90)).strip()})"
            f"  {med[name] / med[baseline]:5.2f}x"
        )
    return med


AUTOMERGE = "INSERT INTO memory_facts_fts (memory_facts_fts, rank) VALUES ('automerge', {})"
ALTERNATIVES: dict[str, tuple[list[str], list[str], list[str]]] = {
    # name: (statements on the file, page size pragmas before a VACUUM, connection pragmas)
    "schema head": ([], [], []),
    "schema head, a second copy": ([], [], []),  # how far two equal files differ
    "FTS5 automerge 16": ([AUTOMERGE.format(16)], [], []),
    "FTS5 automerge 0": ([AUTOMERGE.format(0)], [], []),
    "page_size 1024": ([], ["PRAGMA page_size=1024"], []),
    "page_size 8192": ([], ["PRAGMA page_size=8192"], []),
    "cache_size 16 MB": ([], [], ["PRAGMA cache_size=-16000"]),
    "mmap_size 256 MB": ([], [], ["PRAGMA mmap_size=268435456"]),
    "wal_autocheckpoint 10000": ([], [], ["PRAGMA wal_autocheckpoint=10000"]),
    "events WITHOUT ROWID": (["WITHOUT ROWID memory_fact_events"], [], []),
}


def altered(path: Path, copy: Path, statements: list[str], page: list[str]) -> Path:
    """A copy of ``path`` with ``statements`` run on it (``WITHOUT ROWID <table>`` rebuilds
    that table so, its indexes and the views kept) and, given ``page``, a ``VACUUM`` after
    those pragmas."""
    shutil.copy(path, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    if page:
        conn.execute("PRAGMA journal_mode=DELETE")
        for statement in page:
            conn.execute(statement)
        conn.execute("VACUUM")
        conn.execute("PRAGMA journal_mode=WAL")
    for statement in statements:
        if not statement.startswith("WITHOUT ROWID "):
            conn.execute(statement)
            continue
        table = statement.removeprefix("WITHOUT ROWID ")
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        indexes = [
            row[0]
            for row in conn.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type = 'index'"
                " AND sql IS NOT NULL",
                (table,),
            )
        ]
        views = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'").fetchall()
        conn.execute("PRAGMA legacy_alter_table=ON")
        conn.execute("BEGIN")
        for name, _ in views:
            conn.execute(f'DROP VIEW "{name}"')
        conn.execute(f'ALTER TABLE "{table}" RENAME TO rebuilt')
        conn.execute(sql.rstrip() + " WITHOUT ROWID")
        conn.execute(f'INSERT INTO "{table}" SELECT * FROM rebuilt')
        conn.execute("DROP TABLE rebuilt")
        for created in [*indexes, *(view for _, view in views)]:
            conn.execute(created)
        conn.execute("COMMIT")
    conn.close()
    return copy


def alternatives(rounds: int) -> int:
    """``--alternatives``: the bare save on each altered copy, taking turns."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        path = root / "memory.db"
        migrations.upgrade(f"sqlite:///{path}")
        with open_storage(f"sqlite:///{path}") as storage:
            facts = [new_fact(n) for n in range(FACTS)]
            storage.save(MemoryDocument(facts=facts), user_id=REPLAYED, agent_name=AGENT)
        replays: dict[str, Replay] = {}
        for n, (name, (statements, page, pragmas_)) in enumerate(ALTERNATIVES.items()):
            replays[name] = Replay(altered(path, root / f"{n}.db", statements, page))
            for pragma in pragmas_:
                replays[name].conn.execute(pragma)
        times = measure(
            {
                name: lambda r=replay: r.save(claim=True, fact=True, event=True)
                for name, replay in replays.items()
            },
            rounds,
        )
    head = percentile(times["schema head"], 50)
    print(f"the bare save (claim, fact row, event row), median (p90) of {rounds} rounds")
    for name, t in times.items():
        median = percentile(t, 50)
        p90 = fmt(percentile(t, 90)).strip()
        print(f"   {name:30} {fmt(median)} ({p90})  {median / head:5.2f}x")
    return 0


def main() -> int:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 2000
    if "--alternatives" in sys.argv:
        print(f"memory_sql measured: {measured_source()}; SQLite {sqlite3.sqlite_version}")
        print(f"load average {os.getloadavg()[0]:.2f}")
        status = alternatives(rounds)
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return status
    print(f"memory_sql measured: {measured_source()}; SQLite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        path = root / "memory.db"
        url = f"sqlite:///{path}"
        seeded(url).close()
        statements = trace_one_add(url)
        print(f"\n1. one add through SQLStorage (a warm cache): {len(statements)} statements")
        for statement in statements:
            print(f"   {statement[:150]}{'…' if len(statement) > 150 else ''}")

        before = root / "at-0019.db"  # the schema before revision 0020 dropped three indexes
        shutil.copy(path, before)
        engine_before = create_engine(f"sqlite:///{before}")
        migrations.downgrade(engine_before, "0019")
        engine_before.dispose()
        bare = without(path, root / "no-fts.db", indexes=False)
        barest = without(path, root / "no-fts-no-indexes.db", indexes=True)
        replay, replay_bare, replay_barest = Replay(path), Replay(bare), Replay(barest)
        replay_before = Replay(before)
        storage = open_storage(url)
        lg = SqliteStore(
            pragmas(sqlite3.connect(root / "lg.db", isolation_level=None, check_same_thread=False))
        )
        lg.setup()
        counter = [0]

        def ms_add() -> None:
            counter[0] += 1
            doc = storage.load(user_id=USER, agent_name=AGENT)
            doc.facts.append(new_fact(counter[0]))
            storage.save(doc, user_id=USER, agent_name=AGENT, expected_version=doc.version)

        def ms_undo() -> None:  # untimed: the memory stays at 200 facts
            doc = storage.load(user_id=USER, agent_name=AGENT)
            doc.facts.pop()
            storage.save(doc, user_id=USER, agent_name=AGENT, expected_version=doc.version)

        def ms_load() -> None:
            storage.load(user_id=USER, agent_name=AGENT)

        def lg_put() -> None:
            counter[0] += 1
            lg.put(
                ("profiled", AGENT, "facts"),
                f"fact_{counter[0]}",
                {"content": f"fact {counter[0]}", "category": "context", "confidence": 0.9},
            )

        variants: dict[str, Callable[[], object]] = {
            "SqliteStore.put (WAL, NORMAL)": lg_put,
            "memory_sql add (load, append, save)": ms_add,
            "memory_sql cached load": ms_load,
            "bare: PK read of the version": replay.read,
            "bare: BEGIN IMMEDIATE; COMMIT": lambda: replay.save(
                claim=False, fact=False, event=False
            ),
            "bare: + version claim": lambda: replay.save(claim=True, fact=False, event=False),
            "bare: + fact row (FTS5 triggers)": lambda: replay.save(
                claim=True, fact=True, event=False
            ),
            "bare: + event row = the save's SQL": lambda: replay.save(
                claim=True, fact=True, event=True
            ),
            "bare: the save's SQL, no FTS5": lambda: replay_bare.save(
                claim=True, fact=True, event=True
            ),
            "bare: … and no secondary index": lambda: replay_barest.save(
                claim=True, fact=True, event=True
            ),
            "bare: the save's SQL at revision 0019": lambda: replay_before.save(
                claim=True, fact=True, event=True
            ),
        }
        undo = {"memory_sql add (load, append, save)": ms_undo}
        times = measure(variants, rounds, after=undo)
        storage.close()
        lg.conn.close()

    med = shown(
        times,
        "SqliteStore.put (WAL, NORMAL)",
        f"\n2. median (p90) of {rounds} rounds, variants taking turns; ÷ SqliteStore.put",
    )
    put = med["SqliteStore.put (WAL, NORMAL)"]

    sql = med["bare: + event row = the save's SQL"]
    parts = [
        (
            "transaction + commit (BEGIN IMMEDIATE … COMMIT, WAL append)",
            med["bare: BEGIN IMMEDIATE; COMMIT"],
        ),
        (
            "version claim (UPDATE memory_scopes … RETURNING)",
            med["bare: + version claim"] - med["bare: BEGIN IMMEDIATE; COMMIT"],
        ),
        (
            "fact row with its FTS5 rows",
            med["bare: + fact row (FTS5 triggers)"] - med["bare: + version claim"],
        ),
        ("  of which the FTS5 index (triggers)", sql - med["bare: the save's SQL, no FTS5"]),
        (
            "  of which the secondary indexes of memory_facts and memory_fact_events",
            med["bare: the save's SQL, no FTS5"] - med["bare: … and no secondary index"],
        ),
        ("event row (INSERT memory_fact_events)", sql - med["bare: + fact row (FTS5 triggers)"]),
        (
            "the 3 indexes revision 0020 dropped, as they cost at 0019",
            med["bare: the save's SQL at revision 0019"] - sql,
        ),
        ("cached load's version read (PK)", med["bare: PK read of the version"]),
        (
            "memory_sql's Python: add - load - the save's SQL",
            med["memory_sql add (load, append, save)"] - med["memory_sql cached load"] - sql,
        ),
        (
            "  the cached load beyond its PK read (copy of the document)",
            med["memory_sql cached load"] - med["bare: PK read of the version"],
        ),
    ]
    print(
        f"\n3. where an add's {fmt(med['memory_sql add (load, append, save)']).strip()} goes"
        f" (differences of medians; ÷ SqliteStore.put {fmt(put).strip()})"
    )
    for label, value in parts:
        print(f"   {label:62} {fmt(value)}  {value / put:5.2f}x")
    return updates(rounds)


def toggled(confidence: float) -> float:
    return 0.55 if confidence != 0.55 else 0.65


def updates(rounds: int) -> int:
    """Section 4: an update of one fact's confidence, whole and as its bare statements."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "memory.db"
        storage = seeded(f"sqlite:///{path}")
        replay = Replay(path)
        replayed = replay.conn.execute(
            "SELECT fact_id, content FROM memory_facts WHERE user_id = ?", (REPLAYED,)
        ).fetchall()
        lg = SqliteStore(pragmas(sqlite3.connect(Path(folder) / "lg.db", isolation_level=None)))
        lg.setup()
        namespace = ("profiled", AGENT, "facts")
        values = {f"fact_{n}": {"content": f"fact {n}", "confidence": 0.9} for n in range(FACTS)}
        for key, value in values.items():
            lg.put(namespace, key, value)
        keys = list(values)
        turn = {"ms": 0, "bare": 0, "lg": 0}

        def ms_update() -> None:
            doc = storage.load(user_id=USER, agent_name=AGENT)
            i = turn["ms"] = (turn["ms"] + 1) % len(doc.facts)
            doc.facts[i] = doc.facts[i].replace(confidence=toggled(doc.facts[i].confidence))
            storage.save(doc, user_id=USER, agent_name=AGENT, expected_version=doc.version)

        def bare_update() -> None:
            i = turn["bare"] = (turn["bare"] + 1) % len(replayed)
            replay.update(*replayed[i], 0.55 + 0.1 * (i % 2))

        def lg_update() -> None:
            i = turn["lg"] = (turn["lg"] + 1) % len(keys)
            value = values[keys[i]]
            value["confidence"] = toggled(value["confidence"])
            lg.put(namespace, keys[i], value)

        times = measure(
            {
                "SqliteStore.put of a key it holds": lg_update,
                "memory_sql update (load, replace, save)": ms_update,
                "memory_sql cached load": lambda: storage.load(user_id=USER, agent_name=AGENT),
                "bare: the update's SQL": bare_update,
            },
            rounds,
        )
        storage.close()
        lg.conn.close()
    med = shown(
        times,
        "SqliteStore.put of a key it holds",
        f"\n4. an update of one fact's confidence: median (p90) of {rounds} rounds; ÷ that put",
    )
    put = med["SqliteStore.put of a key it holds"]
    rest = (
        med["memory_sql update (load, replace, save)"]
        - med["memory_sql cached load"]
        - med["bare: the update's SQL"]
    )
    print(f"   {'memory_sql Python: update - load - its SQL':42} {fmt(rest)}  {rest / put:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
