"""SQLite and PostgreSQL stores side by side with the JSON-file store (DeerFlow's design).

    .venv/bin/python benchmarks/bench_storage.py

Prints per-operation medians and the ratio of each SQL store to the file store, measured in the
same run: load of an unchanged 200-fact memory; save of one new fact into a 200-fact memory;
a cold load with 10 000 scopes stored against one with 10 stored.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt, median_seconds, scratch_postgres

from memory_sql import Fact, MemoryDocument, Scope, migrations
from memory_sql.database import create_engine
from memory_sql.models import fact_digest, utcnow
from memory_sql.schema import memory_facts, memory_scopes
from memory_sql.storage import FileStorage, MemoryStorage, SQLStorage, open_storage

WORDS = [
    "prefers",
    "concise",
    "answers",
    "uses",
    "python",
    "postgres",
    "rust",
    "typescript",
    "works",
    "on",
    "data",
    "pipelines",
    "video",
    "creation",
    "moviepy",
    "lives",
    "in",
    "berlin",
    "likes",
    "tea",
    "hates",
    "meetings",
    "building",
    "agents",
    "喜欢",
    "简洁",
    "回答",
    "项目",
    "视频",
    "创作",
    "数据库",
]
CATEGORIES = ["preference", "knowledge", "context", "behavior", "goal", "correction"]


def fact(rng: random.Random, i: int) -> Fact:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18)))
    return Fact(
        content=f"{text} #{i}",
        category=rng.choice(CATEGORIES),
        confidence=round(rng.uniform(0.7, 1.0), 2),
        source_thread_id=f"thread-{rng.randint(1, 50)}",
    )


def memory(rng: random.Random, facts: int) -> MemoryDocument:
    doc = MemoryDocument(facts=[fact(rng, i) for i in range(facts)])
    doc.user.work_context.summary = "Backend engineer; data pipelines in Python. " * 4
    doc.user.top_of_mind.summary = "Migrating a memory service to PostgreSQL. " * 3
    doc.history.recent_months.summary = "Shipped v2 of the ingestion service. " * 5
    return doc


def bench_load_unchanged(store: MemoryStorage, rng: random.Random) -> float:
    store.save(memory(rng, 200), user_id="bench-load")
    store.load(user_id="bench-load")
    return median_seconds(lambda: store.load(user_id="bench-load"), number=100)


def bench_save_one_fact(store: MemoryStorage, rng: random.Random) -> float:
    store.save(memory(rng, 200), user_id="bench-save")
    counter = iter(range(1000, 10**6))
    times = []
    for _ in range(60):
        doc = store.load(user_id="bench-save")
        doc.facts.append(fact(rng, next(counter)))
        start = time.perf_counter()
        store.save(doc, user_id="bench-save")
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def populate(store: MemoryStorage, scopes: int, rng: random.Random) -> None:
    """``scopes`` memories of 20 facts each, written in bulk (this is set-up, not measured)."""
    now = utcnow()
    if isinstance(store, FileStorage):
        for n in range(scopes):
            doc = memory(rng, 20)
            doc.version = 1
            path = store.path(Scope.of(user_id=f"scope-{n}"))
            path.parent.mkdir(parents=True, exist_ok=True)
            data = doc.to_deerflow()
            path.write_text(json.dumps(data, ensure_ascii=False))
        return
    assert isinstance(store, SQLStorage)
    with store.engine.begin() as conn:
        for start in range(0, scopes, 500):
            batch = range(start, min(start + 500, scopes))
            conn.execute(
                sa.insert(memory_scopes),
                [
                    {
                        "tenant_id": "default",
                        "user_id": f"scope-{n}",
                        "agent_name": "",
                        "version": 1,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for n in batch
                ],
            )
            rows = []
            for n in batch:
                for f in memory(rng, 20).facts:
                    rows.append(
                        {
                            "tenant_id": "default",
                            "user_id": f"scope-{n}",
                            "agent_name": "",
                            "fact_id": f.id,
                            "content": f.content,
                            "content_key": fact_digest(f.content),
                            "category": f.category,
                            "confidence": f.confidence,
                            "source_thread_id": f.source_thread_id,
                            "source_error": None,
                            "created_at": now,
                            "updated_at": now,
                        }
                    )
            conn.execute(sa.insert(memory_facts), rows)
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))


def bench_cold_load(store: MemoryStorage, scopes: int) -> float:
    """Median time to load a memory this process has not cached, among ``scopes`` stored."""
    rng = random.Random(7)
    picks = [rng.randrange(scopes) for _ in range(300)]
    times = []
    for n in picks:
        store._cache.clear()  # type: ignore[attr-defined]  # measure a cache miss every time
        start = time.perf_counter()
        doc = store.load(user_id=f"scope-{n}")
        times.append(time.perf_counter() - start)
        assert len(doc.facts) == 20
    times.sort()
    return times[len(times) // 2]


def sql_store(url: str) -> SQLStorage:
    engine = create_engine(url)
    migrations.upgrade(engine)
    engine.dispose()
    store = open_storage(url)
    assert isinstance(store, SQLStorage)
    return store


def scope_store(name: str, target: str, tmp: str, scopes: int) -> MemoryStorage:
    """An empty store of the backend ``name`` for the many-scopes measurement."""
    if name == "files":
        return open_storage(f"{target}-{scopes}")
    if name == "sqlite":
        return sql_store(f"sqlite:///{tmp}/scopes-{scopes}.db")
    store = sql_store(target)
    with store.engine.begin() as conn:
        conn.execute(sa.delete(memory_scopes))
    return store


def main() -> None:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, scratch_postgres() as pg:
        targets = {"files": str(Path(tmp) / "files"), "sqlite": f"sqlite:///{tmp}/bench.db"}
        if pg is not None:
            targets["postgresql"] = pg
        else:
            print("PostgreSQL unreachable: measuring SQLite and files only")
        for name, target in targets.items():
            rng = random.Random(42)
            store = open_storage(target) if name == "files" else sql_store(target)
            row = results.setdefault(name, {})
            row["load unchanged 200-fact memory"] = bench_load_unchanged(store, rng)
            row["save 1 new fact into 200"] = bench_save_one_fact(store, rng)
            store.close()
            for scopes in (10, 10_000):
                store = scope_store(name, target, tmp, scopes)
                populate(store, scopes, rng)
                row[f"cold load, {scopes:>6} scopes stored"] = bench_cold_load(store, scopes)
                store.close()

    operations = list(results["files"])
    backends = list(results)
    print(
        f"\n{'operation':38}"
        + "".join(f"{b:>14}" for b in backends)
        + "".join(f"{b + '/files':>18}" for b in backends if b != "files")
    )
    for op in operations:
        line = f"{op:38}" + "".join(f"{fmt(results[b][op]):>14}" for b in backends)
        line += "".join(
            f"{results[b][op] / results['files'][op]:>17.2f}x" for b in backends if b != "files"
        )
        print(line)
    print()
    for b in backends:
        flat = (
            results[b]["cold load,  10000 scopes stored"]
            / results[b]["cold load,     10 scopes stored"]
        )
        print(f"{b}: cold load with 10 000 scopes / with 10 scopes = {flat:.2f}x")


if __name__ == "__main__":
    main()
