"""Real faults on a PostgreSQL cluster of the test's own: restarts, a 40 s outage, and one busy
user drained by two worker processes. Nothing queued before, during or after is lost."""

from __future__ import annotations

import multiprocessing
import re
import signal
import threading
import time
from collections import Counter

import pytest
import sqlalchemy as sa
from _workers import run_service_until_idle
from llm_server import llm_config
from test_cli_pipeline import start_worker, stop, wait_for
from test_service import LIKES, chat, conversations_seen, learn

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.schema import memory_facts
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.service import MemoryService

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

OUTAGE_SECONDS = 40


@pytest.fixture
def memory_url(private_pg) -> str:
    url = private_pg.create_database("memory")
    engine = create_engine(url)
    migrations.upgrade(engine)
    engine.dispose()
    return url


def count(url: str, table: sa.Table, *where: sa.ColumnElement[bool]) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(sa.func.count()).select_from(table).where(*where)
            return conn.execute(query).scalar_one()
    finally:
        engine.dispose()


def failed_rows(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(pending.c.last_error).where(pending.c.status == "failed")
            return list(conn.execute(query).scalars())
    finally:
        engine.dispose()


def test_the_first_conversation_after_a_restart_is_queued_not_spooled(private_pg, memory_url, llm):
    llm.responder = learn
    config = llm_config(llm, storage=memory_url, debounce_seconds=0)
    with MemoryService(config, start=False) as service:
        assert service.after_agent(chat("tea"), thread_id="before", user_id="ann") is True
        assert service.memory_context(user_id="ann") == ""  # the pool now holds a connection
        private_pg.restart()
        assert service.after_agent(chat("coffee"), thread_id="after", user_id="ann") is True
        assert len(service.spool) == 0  # written at once, on a fresh connection
        assert service.status()["pending"] == 2
        private_pg.restart()
        assert service.memory_context(user_id="ann") == ""  # a read after a restart works too
        assert service.status()["problems"] == 0
        service.worker.start()
        assert service.flush(timeout=30)
        facts = {f.content for f in service.storage.load(user_id="ann").facts}
    assert facts == {"Likes tea", "Likes coffee"}


def test_a_worker_outlives_a_restart_and_a_long_outage_and_loses_nothing(
    private_pg, memory_url, llm
):
    llm.responder = learn
    config = llm_config(llm, storage=memory_url, debounce_seconds=0, spool_retry_seconds=0.5)
    worker = start_worker(memory_url, llm)
    producer = MemoryService(config, start=False)  # an agent's process: it only enqueues
    try:
        for n in range(5):
            assert producer.after_agent(chat(f"before{n}"), thread_id=f"b{n}", user_id="u1")
        assert wait_for(lambda: count(memory_url, memory_facts) == 5)

        private_pg.restart()
        for n in range(5):
            assert producer.after_agent(chat(f"restart{n}"), thread_id=f"r{n}", user_id="u2")
        assert wait_for(lambda: count(memory_url, memory_facts) == 10)

        private_pg.stop()
        outage_started = time.monotonic()
        during = 20
        for n in range(during):
            assert producer.after_agent(chat(f"outage{n}"), thread_id=f"o{n}", user_id=f"u{n}")
        assert len(producer.spool) == during
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_started)))
        assert worker.poll() is None, "the worker exited during the outage"
        private_pg.start()

        for n in range(5):
            assert producer.after_agent(chat(f"after{n}"), thread_id=f"a{n}", user_id="u3")
        assert wait_for(lambda: len(producer.spool) == 0, timeout=30)
        expected = 5 + 5 + during + 5
        assert wait_for(lambda: count(memory_url, memory_facts) == expected, timeout=60)
        assert wait_for(lambda: count(memory_url, pending) == 0, timeout=30)
        assert worker.poll() is None
    finally:
        producer.close(timeout=5)
        code, _, output = stop(worker, signalled=worker.poll() is not None)
    assert code == 0, output
    assert failed_rows(memory_url) == []
    seen = Counter(LIKES.findall("".join(conversations_seen(llm))))
    assert len(seen) == expected and set(seen.values()) == {1}, seen
    # Two faults (the restart, the outage): each loop logs each once, not once per retry.
    loops = Counter(re.findall(r"memory_sql\.database: (.+?): database unavailable", output))
    assert loops and max(loops.values()) <= 2, (loops, output)
    assert "answers again" in output


def test_one_busy_user_is_updated_one_run_at_a_time_by_two_processes(own_pg_url, llm):
    url = own_pg_url
    keys = 400  # bench_faults.py drains 1 000; 400 keeps max_facts (200) overflowing
    config = llm_config(llm, storage=url, debounce_seconds=0)
    with MemoryService(config, start=False) as service:
        for n in range(keys):
            assert service.after_agent(chat(f"item{n}"), thread_id=f"t{n}", user_id="busy")
    llm.responder = learn
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    settings = {"workers": 8, "lease_seconds": 60.0, "sweep_interval_seconds": 1.0}
    processes = [
        context.Process(
            target=run_service_until_idle, args=(url, llm.base_url, settings, results, 300.0)
        )
        for _ in range(2)
    ]
    started = time.monotonic()
    for process in processes:
        process.start()
    reports = [results.get(timeout=320) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    took = time.monotonic() - started
    statuses = [status for _, status in reports]
    assert sum(s["completed"] for s in statuses) == keys
    assert sum(s["failed_runs"] for s in statuses) == 0
    assert failed_rows(url) == [] and count(url, pending) == 0
    calls = len(llm.requests)
    print(f"busy user: {keys} updates, {calls} LLM calls ({calls / keys:.3f} each), {took:.1f} s")
    assert calls <= 1.05 * keys
    # max_facts: the memory kept the newest it could live; the others were closed, not lost
    assert count(url, memory_facts, memory_facts.c.valid_to.is_(None)) == 200
    assert count(url, memory_facts) == keys


def test_the_worker_command_waits_for_a_database_that_is_down_at_start(private_pg, memory_url, llm):
    private_pg.stop()
    worker = start_worker(memory_url, llm)
    try:
        time.sleep(3)
        assert worker.poll() is None, "the worker gave up on a database that was down"
        private_pg.start()
        config = llm_config(llm, storage=memory_url, debounce_seconds=0)
        llm.responder = learn
        with MemoryService(config, start=False) as producer:
            assert producer.after_agent(chat("late"), thread_id="t", user_id="u")
        assert wait_for(lambda: count(memory_url, memory_facts) == 1, timeout=30)
    finally:
        code, _, output = stop(worker, signalled=worker.poll() is not None)
    assert code == 0, output
    assert "worker started" in output


def test_sigterm_during_the_wait_for_the_database_exits_cleanly(private_pg, memory_url, llm):
    private_pg.stop()
    worker = start_worker(memory_url, llm)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(worker.stdout.readline, "")))
    reader.start()
    # SIGTERM once it waits for the database (before that, Python has no handler installed)
    assert wait_for(lambda: any("database unavailable" in line for line in seen), timeout=60)
    worker.send_signal(signal.SIGTERM)
    started = time.monotonic()
    code = worker.wait(15)
    took = time.monotonic() - started
    reader.join(5)
    output = "".join(seen)
    assert code == 0, output
    assert took < 10
    assert "stopped before starting" in output


def test_a_stopped_database_gives_storage_errors_not_driver_errors(private_pg, memory_url):
    """Every storage call on a database that stopped raises StorageError naming the URL (the
    driver's fast path included: its connect error is the driver's own, not SQLAlchemy's)."""
    from memory_sql import Fact, MemoryDocument, StorageError
    from memory_sql.storage import SQLStorage

    with SQLStorage(create_engine(memory_url)) as storage:
        storage.save(MemoryDocument(facts=[Fact(content="Before")]), user_id="u1")
        assert [f.content for f in storage.load(user_id="u1").facts] == ["Before"]
        private_pg.stop()
        for call in (
            lambda: storage.load(user_id="u1"),
            lambda: storage.load(user_id="u2"),
            lambda: storage.save(MemoryDocument(facts=[Fact(content="During")]), user_id="u3"),
        ):
            with pytest.raises(StorageError, match="connection refused"):
                call()
        private_pg.start()
        assert [f.content for f in storage.load(user_id="u1").facts] == ["Before"]
