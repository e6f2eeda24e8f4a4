"""Functions run in child processes by the multi-process tests (importable by spawn)."""

from __future__ import annotations

from memory_sql import Fact, VersionConflictError
from memory_sql.storage import open_storage


def add_distinct_facts(target, scope, worker, count, start, results) -> None:
    """Load, add one fact, save; retry on conflict; ``count`` times. Reports
    ``(worker, successful saves, conflicts)``."""
    store = open_storage(target)
    saves = conflicts = 0
    start.wait()
    try:
        for i in range(count):
            while True:
                doc = store.load(**scope)
                doc.facts.append(Fact(content=f"worker {worker} fact {i}", confidence=0.8))
                try:
                    store.save(doc, **scope)
                except VersionConflictError:
                    conflicts += 1
                    continue
                saves += 1
                break
    finally:
        store.close()
    results.put((worker, saves, conflicts))


def run_memory_update(target, scope, settings, thread_id, text, start, results) -> None:
    """One :class:`MemoryUpdater` run on a one-turn conversation saying ``text``, started when
    ``start`` is set. Reports ``(thread_id, UpdateResult as a dict)``."""
    from dataclasses import asdict

    from memory_sql.config import MemoryConfig
    from memory_sql.updater import MemoryUpdater

    store = open_storage(target)
    updater = MemoryUpdater(MemoryConfig(**settings), store)
    messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]
    start.wait()
    try:
        result = updater.update_memory(messages, thread_id=thread_id, **scope)
    finally:
        updater.close()
        store.close()
    results.put((thread_id, asdict(result)))
