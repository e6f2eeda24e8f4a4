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
    from memory_sql.update.updater import MemoryUpdater

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


def run_service_until_idle(url, llm_base_url, settings, results, timeout=60.0) -> None:
    """A MemoryService in its own process: work until the queue is empty, then report
    ``(pid, status)`` and exit. Killing it mid-way is what the crash tests do."""
    import os
    import time

    from memory_sql import MemoryConfig
    from memory_sql.service import MemoryService

    config = MemoryConfig(
        storage=url,
        model_name="test-model",
        llm_base_url=llm_base_url,
        llm_api_key="sk-test",
        llm_max_retries=0,
        **settings,
    )
    service = MemoryService(config)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            status = service.status()
            if status["pending"] == 0:
                break
            time.sleep(0.2)  # each look counts the whole queue: not so often it slows the work
    finally:
        service.close(timeout=10)
    results.put((os.getpid(), status))


KILL_POINTS = ("before_save", "before_commit", "after_commit")


def run_service_killed_at(url, llm_base_url, point, results, timeout=60.0) -> None:
    """A MemoryService in its own process that SIGKILLs itself at ``point`` of its first update:

    - ``before_save``: the LLM replied, the save has not begun;
    - ``before_commit``: inside the save's transaction, the queue row completed, not committed
      (SQL stores only: the completion runs inside the save). PostgreSQL writes the save and
      the completion in one statement, which has no such point (it commits whole or not at
      all): here the save takes its transactional form, as it does for a change that needs
      ordered writes;
    - ``after_commit``: the save returned (committed), before anything else happens.

    The hooks wrap the storage and queue classes in this process only. Should the process
    outlive ``timeout`` (the point never came), it reports ``(pid, status)`` and exits."""
    import dataclasses
    import os
    import signal
    import time

    from memory_sql import MemoryConfig
    from memory_sql.queue import UpdateQueue
    from memory_sql.service import MemoryService
    from memory_sql.storage import FileStorage, SQLStorage

    if point not in KILL_POINTS:
        raise ValueError(f"unknown kill point {point!r}")

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    sql_store = "://" in url or url.startswith("sqlite:")
    store_class = SQLStorage if sql_store else FileStorage
    original_save = store_class.save
    original_complete_on = UpdateQueue.complete_on

    def save(self, *args, **kwargs):
        if point == "before_save":
            die()
        version = original_save(self, *args, **kwargs)
        if point == "after_commit":
            die()
        return version

    original_completion = UpdateQueue.completion

    def completion(self, item, mark, saved):
        with_save = original_completion(self, item, mark, saved)
        return dataclasses.replace(with_save, ctes=None) if point == "before_commit" else with_save

    def complete_on(self, conn, item, mark=None):
        completed = original_complete_on(self, conn, item, mark)
        if point == "before_commit":
            die()
        return completed

    store_class.save = save
    UpdateQueue.complete_on = complete_on
    UpdateQueue.completion = completion
    config = MemoryConfig(
        storage=url,
        model_name="test-model",
        llm_base_url=llm_base_url,
        llm_api_key="sk-test",
        llm_max_retries=0,
        llm_timeout_seconds=30,
        workers=1,
        debounce_seconds=0,
        lease_seconds=2.0,
    )
    service = MemoryService(config)
    deadline = time.monotonic() + timeout
    status = service.status()
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            status = service.status()
            if status["pending"] == 0 and status["in_flight"] == 0:
                break
    finally:
        service.close(timeout=10)
    results.put((os.getpid(), status))
