"""Exactly once: a worker process SIGKILLed between an update's save and its queue completion
applies that update once, because on a SQL store the save and the completion of the queue row
commit in one transaction. The scripted LLM answers differently on every call ("Likes tea
(call N)"), so an update applied twice would leave two facts.

Where the kill lands, and what a survivor then finds:

- ``before_save`` (the LLM replied, nothing written): the row is still leased to the dead
  process; a survivor claims it when the lease runs out and asks the LLM again.
- ``before_commit`` (the row deleted inside the save's transaction, not committed): the whole
  transaction rolls back, fact and completion alike; as above, one LLM call more.
- ``after_commit`` (the save and the completion committed): the queue is empty; the survivor
  does nothing. With the save and the completion in separate transactions (the old design),
  this is where an update ran twice: the row would still be there, leased, and a survivor
  would ask the LLM again and add a second fact. The assertions on the LLM calls, the facts
  and the version are the ones that tell the two designs apart.

The JSON-file store keeps its queue in a separate SQLite file (``queue.db``), so there a kill
after the save runs the update again: at least once, which the last test documents.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from _workers import run_service_killed_at, run_service_until_idle
from llm_server import LABELS
from test_service import chat

from memory_sql import MemoryConfig
from memory_sql.database import create_engine
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.service import MemoryService
from memory_sql.storage import open_storage
from memory_sql.storage.configured import QUEUE_FILE

pytestmark = pytest.mark.slow

THREAD = "t1"
LEASE_SECONDS = 2.0
SURVIVOR = {"workers": 1, "lease_seconds": LEASE_SECONDS, "llm_timeout_seconds": 30}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def own_db(request: pytest.FixtureRequest) -> str:
    """A database of this test's own, at the schema head: its queue holds only this test's row."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "own_pg_url")


class TeaPerCall:
    """The scripted LLM's answer: one fact, different on each call ("Likes tea (call N)")."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        with self._lock:
            self.calls += 1
            n = self.calls
        fact = {"content": f"Likes tea (call {n})", "category": "preference", "confidence": 0.9}
        fact.update(LABELS)
        return json.dumps({"user": {}, "history": {}, "newFacts": [fact], "factsToRemove": []})


def enqueue_one(target: str, llm, user: str) -> None:
    """Queue one conversation for (user, coder, THREAD), due at once, with no worker running."""
    config = MemoryConfig(
        storage=target,
        model_name="m",
        llm_base_url=llm.base_url,
        llm_api_key="k",
        debounce_seconds=0,
    )
    with MemoryService(config, start=False) as service:
        assert service.after_agent(chat("tea"), thread_id=THREAD, user_id=user, agent_name="coder")


def queue_rows(queue_url: str) -> int:
    engine = create_engine(queue_url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar()
    finally:
        engine.dispose()


def memory_of(target: str, user: str) -> tuple[int, list[str]]:
    """The memory's version and the contents of the facts learned from THREAD, sorted."""
    store = open_storage(target)
    try:
        doc = store.load(user_id=user, agent_name="coder")
    finally:
        store.close()
    return doc.version, sorted(f.content for f in doc.facts if f.source_thread_id == THREAD)


def kill_at(context, target: str, llm, point: str, results) -> None:
    """Run a worker process that SIGKILLs itself at ``point`` of its update; check it died so."""
    doomed = context.Process(
        target=run_service_killed_at, args=(target, llm.base_url, point, results)
    )
    doomed.start()
    doomed.join(90)
    if doomed.exitcode is None:
        doomed.kill()
        doomed.join(10)
    assert doomed.exitcode == -signal.SIGKILL, f"the worker was not killed at {point}"
    assert len(llm.requests) == 1  # it asked the LLM once, then died


def run_survivor(context, target: str, llm, results) -> dict:
    """A worker process with no hooks, run until the queue is empty; returns its status."""
    survivor = context.Process(
        target=run_service_until_idle, args=(target, llm.base_url, SURVIVOR, results)
    )
    survivor.start()
    pid, status = results.get(timeout=90)
    survivor.join(30)
    assert pid == survivor.pid and survivor.exitcode == 0
    return status


@pytest.mark.parametrize(
    ("point", "llm_calls"),
    [
        pytest.param("after_commit", 1, id="after_commit"),
        pytest.param("before_commit", 2, id="before_commit"),
        pytest.param("before_save", 2, id="before_save"),
    ],
)
def test_a_worker_killed_between_save_and_completion_applies_the_update_exactly_once(
    own_db, llm, scope, point, llm_calls
):
    user = scope["user_id"]
    enqueue_one(own_db, llm, user)
    assert queue_rows(own_db) == 1
    version_before, facts_before = memory_of(own_db, user)
    assert facts_before == []
    llm.responder = TeaPerCall()

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    kill_at(context, own_db, llm, point, results)

    # What the kill left: the save and the completion together, or neither.
    if point == "after_commit":
        assert queue_rows(own_db) == 0
        assert memory_of(own_db, user) == (version_before + 1, ["Likes tea (call 1)"])
    else:
        assert queue_rows(own_db) == 1  # still leased to the dead process
        assert memory_of(own_db, user) == (version_before, [])

    status = run_survivor(context, own_db, llm, results)
    assert status["pending"] == 0 and status["failed"] == 0
    assert status["completed"] == (0 if point == "after_commit" else 1)

    version, facts = memory_of(own_db, user)
    assert facts == [f"Likes tea (call {llm_calls})"]  # one fact: applied once, not twice
    assert version == version_before + 1  # the memory moved exactly once
    assert queue_rows(own_db) == 0
    assert len(llm.requests) == llm_calls  # after_commit: nothing ran again


def test_on_the_file_store_a_kill_after_the_save_runs_the_update_again_at_least_once(
    tmp_path: Path, llm, scope
):
    """The JSON-file store's queue is its own SQLite file: the save and the completion cannot
    commit together, so a kill between them leaves the row to run again: at least once."""
    user = scope["user_id"]
    folder = str(tmp_path / "memory-files")
    queue_url = f"sqlite:///{Path(folder) / QUEUE_FILE}"
    enqueue_one(folder, llm, user)
    assert queue_rows(queue_url) == 1
    llm.responder = TeaPerCall()

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    kill_at(context, folder, llm, "after_commit", results)
    assert queue_rows(queue_url) == 1  # saved, but the row was not completed
    assert memory_of(folder, user) == (1, ["Likes tea (call 1)"])
    status = run_survivor(context, folder, llm, results)

    assert status["pending"] == 0 and status["completed"] == 1
    assert queue_rows(queue_url) == 0
    assert len(llm.requests) == 2  # the saved update was asked for again
    version, facts = memory_of(folder, user)
    assert facts == ["Likes tea (call 1)", "Likes tea (call 2)"]  # and applied twice
    assert version == 2
