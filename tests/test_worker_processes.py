"""Real worker processes: one killed with SIGKILL mid-update loses nothing; two sharing one
PostgreSQL database process each of 200 keys once."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections import Counter

import pytest
import sqlalchemy as sa
from _workers import run_service_until_idle
from test_service import LIKES, chat, conversations_seen, learn

from memory_sql import MemoryConfig
from memory_sql.database import create_engine
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.service import MemoryService

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    url = request.getfixturevalue(f"{request.param}_url")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    engine.dispose()
    return url


def enqueue(url: str, llm, items: list[tuple[str, str, str]]) -> None:
    """Queue (user, thread, thing) conversations, due at once, with no worker running."""
    config = MemoryConfig(
        storage=url, model_name="m", llm_base_url=llm.base_url, llm_api_key="k", debounce_seconds=0
    )
    with MemoryService(config, start=False) as service:
        for user, thread, thing in items:
            assert service.after_agent(chat(thing), thread_id=thread, user_id=user)


def pending_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar()
    finally:
        engine.dispose()


def test_a_killed_worker_loses_nothing_and_nothing_runs_twice(db_url, llm, scope):
    user = scope["user_id"]
    enqueue(db_url, llm, [(user, f"t{n}", f"thing{n}") for n in range(5)])
    hung = threading.Event()

    def hang_on_the_first(body: dict) -> str:
        if not hung.is_set():
            hung.set()
            threading.Event().wait(30)  # the worker asking is killed meanwhile
        return learn(body)

    llm.responder = hang_on_the_first
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    settings = {"workers": 1, "lease_seconds": 2.0, "llm_timeout_seconds": 60}
    doomed = context.Process(
        target=run_service_until_idle, args=(db_url, llm.base_url, settings, results)
    )
    doomed.start()
    assert hung.wait(60), "the first worker never called the LLM"
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join(10)
    assert doomed.exitcode == -signal.SIGKILL
    assert pending_rows(db_url) == 5  # one leased by the dead process, four waiting

    survivor = context.Process(
        target=run_service_until_idle,
        args=(db_url, llm.base_url, settings | {"workers": 2}, results),
    )
    survivor.start()
    pid, status = results.get(timeout=90)
    survivor.join(30)
    assert pid == survivor.pid and survivor.exitcode == 0
    assert status["pending"] == 0 and status["completed"] == 5
    assert pending_rows(db_url) == 0

    seen = Counter(LIKES.findall("".join(conversations_seen(llm))))
    hung_thing = next(thing for thing, count in seen.items() if count == 2)
    assert sorted(seen.values()) == [1, 1, 1, 1, 2], seen  # the killed run asked once more
    with MemoryService(
        MemoryConfig(storage=db_url, model_name="m", llm_base_url=llm.base_url),
        start=False,
    ) as service:
        facts = [f.content for f in service.storage.load(user_id=user).facts]
    assert sorted(facts) == [f"Likes thing{n}" for n in range(5)]
    assert facts.count(f"Likes {hung_thing}") == 1


@pytest.mark.postgres
def test_two_worker_processes_share_200_keys_without_overlap(pg_url, llm):
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    engine.dispose()
    items = [(f"user-{n % 20}", f"thread-{n}", f"item{n}") for n in range(200)]
    enqueue(pg_url, llm, items)

    def slow_learn(body: dict) -> str:
        threading.Event().wait(0.03)  # long enough that both processes get to work
        return learn(body)

    llm.responder = slow_learn
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    settings = {"workers": 2, "lease_seconds": 60.0}
    workers = [
        context.Process(
            target=run_service_until_idle, args=(pg_url, llm.base_url, settings, results)
        )
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    completed = [status["completed"] for _, status in reports]
    assert sum(completed) == 200
    assert all(count > 0 for count in completed), completed
    seen = Counter(LIKES.findall("".join(conversations_seen(llm))))
    assert len(seen) == 200 and set(seen.values()) == {1}
    assert pending_rows(pg_url) == 0
