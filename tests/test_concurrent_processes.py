"""Four real processes race load → add a fact → save on one scope."""

from __future__ import annotations

import multiprocessing
import warnings

import pytest
from _workers import add_distinct_facts

from memory_sql.storage import FileStorage, open_storage

WORKERS = 4
SAVES_EACH = 25


def _race(target: str, scope: dict) -> tuple[int, int]:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WORKERS)  # every worker is ready before any begins
    results = context.Queue()
    processes = [
        context.Process(
            target=add_distinct_facts, args=(target, scope, n, SAVES_EACH, start, results)
        )
        for n in range(WORKERS)
    ]
    for process in processes:
        process.start()
    reports = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    return sum(r[1] for r in reports), sum(r[2] for r in reports)


@pytest.mark.slow
def test_four_processes_lose_no_update(target, scope):
    saves, conflicts = _race(target, scope)
    with open_storage(target) as store:
        doc = store.load(**scope)
        is_file_store = isinstance(store, FileStorage)
    contents = [f.content for f in doc.facts]
    expected = {f"worker {w} fact {i}" for w in range(WORKERS) for i in range(SAVES_EACH)}
    assert saves == WORKERS * SAVES_EACH
    lost = expected - set(contents)
    if is_file_store:
        # The baseline has no cross-process lock: report what it loses, do not fail on it.
        warnings.warn(
            f"file store: {len(lost)} of {len(expected)} facts lost to concurrent processes "
            f"(version {doc.version}, {saves} saves reported successful, {conflicts} conflicts)",
            stacklevel=1,
        )
        return
    assert lost == set()
    assert len(contents) == len(set(contents)) == WORKERS * SAVES_EACH
    assert doc.version == saves
    assert conflicts > 0, "the processes never raced; the test proves nothing"
