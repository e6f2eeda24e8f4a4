"""Where a PostgreSQL add costs what: memory_sql's save taken apart beside LangGraph's
``PostgresStore.put``, on one server, at equal durability (``synchronous_commit`` on).

    .venv/bin/python benchmarks/profile_pg_save.py [--rounds N]
    .venv/bin/python benchmarks/profile_pg_save.py --gin

1. Whole operations, taking turns: memory_sql's add (cached load, append, save; the fact taken
   out again untimed), LangGraph's ``put`` of one item, and their parts on the bare driver
   (psycopg 3, autocommit, statements prepared): a round trip (``SELECT 1``), the cached load's
   version read, the save's one statement (the version claim, the fact row and its event row in
   data-modifying CTEs) as memory_sql sends it.
2. The server's share, each part inside one transaction that is rolled back (no commit, so no
   WAL flush): the version claim, the fact row, the event row; the fact row again with each
   secondary index, the foreign key to the scope row, or the ``tsvector`` (a search text of
   one word) taken away in turn (``DROP`` inside the rolled-back transaction); the commit's
   cost as an autocommitted insert less the same insert in a transaction.
3. What is left: memory_sql's Python (an add less the version read and the one statement).
4. HOT updates: of 1 000 saves that each change one fact's confidence (40 memories of 100
   facts), how many PostgreSQL wrote as heap-only tuples (no new index entry): at the schema
   head, with its fill factor reset to 100, and with revision 0020's confidence index back.

``--gin`` measures instead the GIN index's ``fastupdate``, off (the schema's) and on with a
4 MB or a 64 kB pending list, each on a database of its own holding 4 000 facts of 100
memories (analyzed): per round, 50 inserts of a fact (the statements timed, committed by 50)
then 20 ranked matches of a memory (``match_facts``, two terms), the variants taking turns.

Medians (and p90) of many calls after a warm-up, variants taking turns round by round. Needs
the bench extra (``pip install -e '.[bench]'``). The figures go to docs/write-path.md.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt, libpq_url, measured_source, percentile, scratch_postgres

from memory_sql import Fact, MemoryDocument, migrations
from memory_sql.database import create_engine
from memory_sql.models import fact_digest
from memory_sql.scope import Scope
from memory_sql.storage import SQLStorage
from memory_sql.storage.base import diff_documents
from memory_sql.storage.sql import _one_statement_parameters, _one_statement_sql
from memory_sql.text_search import search_text

try:
    import psycopg
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool
except ImportError:  # pragma: no cover
    sys.exit("needs the bench extra: pip install -e '.[bench]'")

USER, AGENT, FACTS = "profiled", "coder", 200
ROUNDS = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
PER_ROUND = 60
INDEXES = (
    "pk_memory_facts",
    "ix_memory_facts_search",
    "ix_memory_facts_tenant_category",
    "ix_memory_facts_tenant_valid_to",
    "uq_memory_facts_live_content_key",
)
# The indexes revision 0020 dropped, built again inside a rolled-back transaction: what they
# cost an add before it.
DROPPED_FACT_INDEXES = [
    "CREATE INDEX ix_memory_facts_tenant_created_at ON memory_facts (tenant_id, created_at)",
    "CREATE INDEX ix_memory_facts_scope_confidence ON memory_facts "
    "(tenant_id, user_id, agent_name, confidence DESC) WHERE valid_to IS NULL",
]
DROPPED_EVENT_INDEX = [
    "CREATE INDEX ix_memory_fact_events_tenant_occurred_at ON memory_fact_events "
    "(tenant_id, occurred_at)"
]
INSERT_FACT = """INSERT INTO memory_facts (tenant_id, user_id, agent_name, fact_id, content,
    content_key, search_text, category, confidence, created_at, updated_at)
    VALUES ('default', %s, %s, %s, %s, %s, %s, 'preference', 0.9, %s, %s)"""
INSERT_EVENT = """INSERT INTO memory_fact_events (tenant_id, user_id, agent_name, version,
    fact_id, event, category, confidence, occurred_at, content_after)
    VALUES ('default', %s, %s, %s, %s, 'added', 'preference', 0.9, %s, %s)"""
CLAIM = """UPDATE memory_scopes SET version = version + 1, updated_at = %s
    WHERE tenant_id = 'default' AND user_id = %s AND agent_name = %s RETURNING created_at"""


def content() -> str:
    return f"prefers concise answers about data pipelines {uuid.uuid4().hex[:8]}"


def fact_row(text: str | None = None, *, one_word: bool = False) -> tuple[Any, ...]:
    text = text or content()
    now = datetime.now(timezone.utc)
    searchable = "x" if one_word else search_text(text)
    return (USER, AGENT, uuid.uuid4().hex[:16], text, fact_digest(text), searchable, now, now)


def taking_turns(sides: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in sides}
    for run in sides.values():
        for _ in range(10):
            run()
    for _ in range(ROUNDS):
        for name, run in sides.items():
            for _ in range(PER_ROUND):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


def show(label: str, times: list[float], against: float | None = None) -> float:
    median = statistics.median(times)
    ratio = f"  {median / against:5.2f}x" if against else ""
    print(f"  {label:58} {fmt(median)} ({fmt(percentile(times, 90)).strip()}){ratio}")
    return median


def in_rolled_back(conn: psycopg.Connection, ddl: list[str], work: Callable[[], object]) -> float:
    """The median time of ``work`` inside one transaction (after ``ddl``), rolled back."""
    times = []
    with conn.transaction(force_rollback=True):
        for statement in ddl:
            conn.execute(statement)
        for _ in range(10):
            work()
        for _ in range(PER_ROUND):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def hot_updates() -> None:
    """Section 4: HOT updates of ``memory_facts`` under three schemas, each on its own
    database."""
    variants = {
        "schema head (fillfactor 90)": [],
        "fillfactor 100": ["ALTER TABLE memory_facts RESET (fillfactor)"],
        "fillfactor 100, the confidence index back (revision 0019)": [
            "ALTER TABLE memory_facts RESET (fillfactor)",
            DROPPED_FACT_INDEXES[1],
        ],
    }
    rng = random.Random(0)
    for label, ddl in variants.items():
        with scratch_postgres() as url:
            assert url is not None
            engine = create_engine(url)
            migrations.upgrade(engine)
            with engine.begin() as conn:
                for statement in ddl:
                    conn.exec_driver_sql(statement)
            with SQLStorage(engine) as store:
                for m in range(40):
                    facts = [Fact(content=f"{m} {i} {content()}") for i in range(100)]
                    store.save(MemoryDocument(facts=facts), user_id=f"u{m}", agent_name=AGENT)
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT pg_stat_reset()")
                for _ in range(1000):
                    user = f"u{rng.randrange(40)}"
                    doc = store.load(user_id=user, agent_name=AGENT)
                    i = rng.randrange(len(doc.facts))
                    confidence = round(rng.random(), 3)
                    doc.facts[i] = doc.facts[i].model_copy(update={"confidence": confidence})
                    store.save(doc, user_id=user, agent_name=AGENT, expected_version=doc.version)
            engine.dispose()  # its backends end and report their counts
            time.sleep(1)
            with psycopg.connect(libpq_url(url), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                    " WHERE relname = 'memory_facts'"
                ).fetchone()
            assert row is not None
            print(f"  {label:58} {row[1]:5} HOT of {row[0]} updates")


GIN_VARIANTS = {
    "fastupdate off (the schema)": "",
    "fastupdate on, 4 MB pending list": "fastupdate = on",
    "fastupdate on, 64 kB pending list": "fastupdate = on, gin_pending_list_limit = 64",
}


def gin_pending() -> int:
    """``--gin``: insert and match times under each ``fastupdate`` setting."""
    from contextlib import ExitStack

    from memory_sql.storage.search import match_facts

    rng = random.Random(0)
    words = [f"word{i}" for i in range(2000)]
    users = [f"u{i}" for i in range(100)]

    def insert(conn: psycopg.Connection) -> None:
        text = " ".join(rng.choice(words) for _ in range(8)) + " " + uuid.uuid4().hex[:8]
        now = datetime.now(timezone.utc)
        row = (rng.choice(users), AGENT, uuid.uuid4().hex[:16], text, fact_digest(text))
        conn.execute(INSERT_FACT, (*row, search_text(text), now, now))

    with ExitStack() as stack:
        sides: dict[str, tuple[Any, psycopg.Connection]] = {}
        for name, options in GIN_VARIANTS.items():
            url = stack.enter_context(scratch_postgres())
            assert url is not None
            engine = create_engine(url)
            stack.callback(engine.dispose)
            migrations.upgrade(engine)
            conn = psycopg.connect(libpq_url(url), autocommit=True, prepare_threshold=0)
            stack.callback(conn.close)
            if options:
                conn.execute(f"ALTER INDEX ix_memory_facts_search SET ({options})")
            for user in users:
                conn.execute(
                    "INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version,"
                    " created_at, updated_at) VALUES ('default', %s, %s, 1, now(), now())",
                    (user, AGENT),
                )
            for _ in range(4000):
                insert(conn)
            conn.execute("VACUUM ANALYZE memory_facts")
            sides[name] = (engine, conn)
        inserts: dict[str, list[float]] = {name: [] for name in sides}
        matches: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(ROUNDS * 8):
            for name, (engine, conn) in sides.items():
                with conn.transaction():
                    for _ in range(50):
                        start = time.perf_counter()
                        insert(conn)
                        inserts[name].append(time.perf_counter() - start)
                for _ in range(20):
                    scope = Scope.of(user_id=rng.choice(users), agent_name=AGENT)
                    terms = rng.sample(words, 2)
                    start = time.perf_counter()
                    match_facts(engine, scope, terms, facts=40, limit=10)
                    matches[name].append(time.perf_counter() - start)
    first = next(iter(sides))
    print("GIN fastupdate: median (p90); ÷ fastupdate off")
    for label, times in (("insert of a fact", inserts), ("ranked match of a memory", matches)):
        base = statistics.median(times[first])
        for name, series in times.items():
            show(f"{label}, {name}", series, base)
    return 0


def main() -> int:
    if "--gin" in sys.argv:
        print(f"GIN fastupdate: load average {os.getloadavg()[0]:.2f}")
        status = gin_pending()
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
        return status
    load = os.getloadavg()
    print(f"PostgreSQL add, taken apart: {os.cpu_count()} CPUs, load average {load[0]:.2f}")
    print(f"memory_sql measured: {measured_source()}")
    with scratch_postgres() as url, scratch_postgres() as lg_url:
        if url is None or lg_url is None:
            print("PostgreSQL unreachable: skipped")
            return 0
        engine = create_engine(url)
        migrations.upgrade(engine)
        store = SQLStorage(engine)
        facts = [Fact(content=content(), category="preference") for _ in range(FACTS)]
        store.save(MemoryDocument(facts=facts), user_id=USER, agent_name=AGENT)
        pool = ConnectionPool(
            libpq_url(lg_url),
            min_size=1,
            max_size=1,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=True,
        )
        lg = PostgresStore(pool)
        lg.setup()
        bare = psycopg.connect(libpq_url(url), autocommit=True, prepare_threshold=0)
        scope = Scope.of(user_id=USER, agent_name=AGENT)
        added: list[str] = []

        def ms_add() -> None:
            doc = store.load(user_id=USER, agent_name=AGENT)
            fact = Fact(content=content(), category="preference")
            doc.facts.append(fact)
            store.save(doc, user_id=USER, agent_name=AGENT)
            added.append(fact.id)

        def ms_undo() -> None:
            doc = store.load(user_id=USER, agent_name=AGENT)
            doc.facts = [f for f in doc.facts if f.id not in added]
            added.clear()
            store.save(doc, user_id=USER, agent_name=AGENT)

        def lg_put() -> None:
            lg.put((USER, AGENT, "facts"), uuid.uuid4().hex[:16], {"content": content()})

        def one_statement() -> Callable[[], object]:
            """The add's one statement, as memory_sql sends it, on the bare driver: each call
            adds a fact (the version moves on by one each time)."""

            def run() -> None:
                doc = store.load(user_id=USER, agent_name=AGENT)
                base = doc.clone()
                doc.facts.append(Fact(content=content(), category="preference"))
                now = datetime.now(timezone.utc)
                changes = diff_documents(base, doc, now)
                head = bare.execute(
                    "SELECT created_at FROM memory_scopes WHERE user_id = %s", (USER,)
                ).fetchone()
                assert head is not None
                parameters, writes = _one_statement_parameters(
                    scope, changes, doc.version, head[0], now
                )
                start = time.perf_counter()
                assert bare.execute(_one_statement_sql(False, writes), parameters).fetchall()
                spent.append(time.perf_counter() - start)
                store._cache.clear()

            return run

        spent: list[float] = []
        stamp = "SELECT version, created_at FROM memory_scopes WHERE tenant_id = 'default' AND "
        stamp += "user_id = %s AND agent_name = %s"
        sides: dict[str, Callable[[], object]] = {
            "memory_sql add (cached load, append, save)": lambda: (ms_add(), ms_undo()),
            "LangGraph PostgresStore.put": lg_put,
            "bare: SELECT 1 (a round trip)": lambda: bare.execute("SELECT 1").fetchall(),
            "bare: the cached load's version read": lambda: bare.execute(
                stamp, (USER, AGENT)
            ).fetchall(),
        }
        # the add alone (its undo untimed): time the add inside the pair
        add_times: list[float] = []

        def timed_add() -> None:
            start = time.perf_counter()
            ms_add()
            add_times.append(time.perf_counter() - start)
            ms_undo()

        sides["memory_sql add (cached load, append, save)"] = timed_add
        times = taking_turns(sides)
        spent.clear()
        statement = one_statement()
        for _ in range(10):
            statement()
        spent.clear()
        for _ in range(ROUNDS * PER_ROUND // 2):
            statement()
        print("\n1. whole operations, median (p90); ÷ LangGraph's put")
        put = statistics.median(times["LangGraph PostgresStore.put"])
        add = show("memory_sql add (cached load, append, save)", add_times, put)
        show("LangGraph PostgresStore.put", times["LangGraph PostgresStore.put"], put)
        trip = show("bare: SELECT 1 (a round trip)", times["bare: SELECT 1 (a round trip)"], put)
        read = show(
            "bare: the cached load's version read",
            times["bare: the cached load's version read"],
            put,
        )
        one = show("bare: the save's one statement (claim, fact, event)", spent, put)

        print("\n2. the server's share (in a transaction rolled back: no commit), per call")
        version = [0]

        def claim() -> None:
            bare.execute(CLAIM, (datetime.now(timezone.utc), USER, AGENT))

        def fact() -> None:
            bare.execute(INSERT_FACT, fact_row())

        def event() -> None:
            version[0] += 1
            now = datetime.now(timezone.utc)
            bare.execute(INSERT_EVENT, (USER, AGENT, 10_000 + version[0], "f", now, content()))

        parts: dict[str, list[float]] = {}
        variants: dict[str, tuple[list[str], Callable[[], object]]] = {
            "version claim (UPDATE memory_scopes … RETURNING)": ([], claim),
            "fact row (all its indexes, foreign key, tsvector)": ([], fact),
            "event row (INSERT memory_fact_events)": ([], event),
            "  fact row, no foreign key to memory_scopes": (
                ["ALTER TABLE memory_facts DROP CONSTRAINT fk_memory_facts_memory_scopes CASCADE"],
                fact,
            ),
            "  fact row, a one-word search text (tsvector, GIN)": (
                [],
                lambda: bare.execute(INSERT_FACT, fact_row(one_word=True)),
            ),
            "  fact row, no secondary index": (
                [f"DROP INDEX {ix}" for ix in INDEXES[1:]],
                fact,
            ),
        }
        for ix in INDEXES[1:]:
            variants[f"  fact row, without {ix}"] = ([f"DROP INDEX {ix}"], fact)
        variants["  fact row, with the 2 indexes revision 0020 dropped"] = (
            DROPPED_FACT_INDEXES,
            fact,
        )
        variants["  event row, with the index revision 0020 dropped"] = (DROPPED_EVENT_INDEX, event)
        for _ in range(3):
            for name, (ddl, work) in variants.items():
                parts.setdefault(name, []).append(in_rolled_back(bare, ddl, work))
        whole = statistics.median(parts["fact row (all its indexes, foreign key, tsvector)"])
        event_row = statistics.median(parts["event row (INSERT memory_fact_events)"])
        for name, medians in parts.items():
            median = statistics.median(medians)
            delta = median - (event_row if name.startswith("  event") else whole)
            sign = "+" if delta >= 0 else ""
            saved = f"  ({sign}{fmt(delta).strip()})" if name.startswith("  ") else ""
            print(f"  {name:58} {fmt(median)}{saved}")
        in_tx = in_rolled_back(bare, [], fact)
        committed = []
        for _ in range(ROUNDS * PER_ROUND // 2):
            start = time.perf_counter()
            fact()
            committed.append(time.perf_counter() - start)
        commit = statistics.median(committed) - in_tx
        print(f"  {'the commit (autocommitted insert less the same in a transaction)':58}", end="")
        print(f" {fmt(commit)}")

        print("\n3. what is left")
        print(f"  {'memory_sql Python (add - version read - one statement)':58} ", end="")
        print(f"{fmt(add - read - one)}  {(add - read - one) / put:5.2f}x")
        print(f"  {'an add beyond two round trips and the put':58} ", end="")
        print(f"{fmt(add - put - trip)}")
        print("\n4. HOT updates of memory_facts (1 000 confidence changes, 40 memories)")
        hot_updates()
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
        bare.close()
        pool.close()
        store.close()
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
