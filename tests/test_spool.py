"""The spool: what it takes is kept on disk (across the process), drained in batches once the
database answers, bounded per tenant; what it cannot take is refused, never dropped.

Real parts: a PostgreSQL cluster of the test's own, stopped and started; SQLite spool files;
a process killed with SIGKILL."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal

import pytest
import sqlalchemy as sa
from llm_server import llm_config
from test_service import chat

from memory_sql import MemoryService, SpoolFullError, migrations
from memory_sql.config import QueueSettings
from memory_sql.database import create_engine
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.models import utcnow
from memory_sql.queue import UpdateQueue
from memory_sql.queue.journal import claim_slot, orphans
from memory_sql.queue.pending import Enqueued
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.scope import Scope

pytestmark = pytest.mark.postgres


@pytest.fixture
def memory_url(private_pg) -> str:
    url = private_pg.create_database("memory")
    migrations.upgrade(url)
    return url


def queued_threads(url: str) -> dict[tuple[str, str], str]:
    """(tenant, thread) -> the queued messages' text, of every queue row."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(pending.c.tenant_id, pending.c.thread_id, pending.c.messages)
            ).all()
    finally:
        engine.dispose()
    return {(t, th): " ".join(m["text"] for m in json.loads(body)) for t, th, body in rows}


def test_a_spooled_conversation_outlives_its_process_and_is_queued_by_the_next(
    private_pg, memory_url, llm, tmp_path
):
    config = llm_config(llm, storage=memory_url, spool_dir=tmp_path / "spool")
    first = MemoryService(config, start=False)
    private_pg.stop()
    for n in range(30):
        assert first.after_agent(chat(f"tea{n}"), thread_id=f"t{n}", user_id="ann") is True
    assert len(first.spool) == 30
    assert first.close(timeout=2)  # the database is still away: they stay on disk
    private_pg.start()
    assert queued_threads(memory_url) == {}
    with MemoryService(config, start=False) as second:  # adopts the file and drains it
        second.spool.write()  # (its thread may have written them already)
        queued = queued_threads(memory_url)
        assert len(second.spool) == 0
    assert set(queued) == {("default", f"t{n}") for n in range(30)}
    assert "tea7" in queued[("default", "t7")]


def _spool_and_die(url: str, spool_dir: str, base_url: str, events: tuple) -> None:
    started, outage, spooled = events
    service = MemoryService(llm_config_for(url, spool_dir, base_url), start=False)
    started.set()
    outage.wait(60)
    for n in range(20):
        assert service.after_agent(chat(f"milk{n}"), thread_id=f"k{n}", user_id="bob")
    spooled.set()
    signal.pause()


def llm_config_for(url: str, spool_dir: str, base_url: str):
    from memory_sql import MemoryConfig

    return MemoryConfig(
        storage=url, spool_dir=spool_dir, model_name="m", llm_base_url=base_url, llm_api_key="k"
    )


def test_a_process_killed_with_conversations_spooled_loses_none(
    private_pg, memory_url, llm, tmp_path
):
    spool_dir = str(tmp_path / "spool")
    context = multiprocessing.get_context("spawn")
    events = (context.Event(), context.Event(), context.Event())
    process = context.Process(
        target=_spool_and_die, args=(memory_url, spool_dir, llm.base_url, events)
    )
    process.start()
    try:
        assert events[0].wait(60)
        private_pg.stop()
        events[1].set()
        assert events[2].wait(60)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.join(10)
    assert process.exitcode == -signal.SIGKILL
    private_pg.start()
    config = llm_config(llm, storage=memory_url, spool_dir=spool_dir)
    with MemoryService(config, start=False) as service:
        service.spool.write()
        assert len(service.spool) == 0
    assert set(queued_threads(memory_url)) == {("default", f"k{n}") for n in range(20)}


def test_one_tenant_fills_its_own_share_of_the_spool_and_no_more(
    private_pg, memory_url, llm, tmp_path, caplog
):
    config = llm_config(
        llm,
        storage=memory_url,
        spool_dir=tmp_path / "spool",
        spool_max_conversations=12,
        spool_max_per_tenant=5,
    )
    with MemoryService(config, start=False) as service:
        private_pg.stop()
        for n in range(2):
            assert service.after_agent(chat(f"a{n}"), thread_id=f"a{n}", tenant_id="small")
        for n in range(50):  # a noisy tenant: 5 kept, 45 refused (and told so)
            kept = service.after_agent(chat(f"n{n}"), thread_id=f"n{n}", tenant_id="noisy")
            assert kept is (n < 5)
        with pytest.raises(SpoolFullError, match="spool_max_per_tenant 5"):
            service.queue_conversation(chat("x"), thread_id="x", tenant_id="noisy")
        for n in range(2, 5):
            assert service.after_agent(chat(f"a{n}"), thread_id=f"a{n}", tenant_id="small")
        for n in range(5):  # the whole spool now full: 12 = 5 + 5 + 2
            kept = service.after_agent(chat(f"o{n}"), thread_id=f"o{n}", tenant_id="other")
            assert kept is (n < 2)
        assert service.spool.tenant_count("small") == 5
        assert service.spool.refused == 45 + 1 + 3
        logged = [r for r in caplog.records if r.name == "memory_sql.spool.refused"]
        assert 1 <= len(logged) <= 6  # the 1st, 2nd, 4th … refusal, not one line each
        private_pg.start()
        assert service.spool.write() == 12
        assert service.status()["spool_refused"] == 49
    queued = queued_threads(memory_url)
    assert {th for t, th in queued if t == "small"} == {f"a{n}" for n in range(5)}
    assert {th for t, th in queued if t == "noisy"} == {f"n{n}" for n in range(5)}
    assert len(queued) == 12


def test_without_a_spool_an_outage_refuses_instead_of_acknowledging(private_pg, memory_url, llm):
    config = llm_config(llm, storage=memory_url, spool_max_conversations=0)
    with MemoryService(config, start=False) as service:
        private_pg.stop()
        assert service.after_agent(chat("tea"), thread_id="t", user_id="u") is False
        assert service.spool.refused == 1
        private_pg.start()
        assert service.after_agent(chat("tea"), thread_id="t", user_id="u") is True


def test_a_key_with_spooled_conversations_is_queued_behind_them_in_order(
    private_pg, memory_url, llm, tmp_path
):
    config = llm_config(
        llm, storage=memory_url, spool_dir=tmp_path / "spool", spool_retry_seconds=600
    )
    with MemoryService(config, start=False) as service:
        private_pg.stop()
        for n in range(3):  # flushes of one thread accumulate, in order
            assert service.before_summarization(chat(f"f{n}"), thread_id="t", user_id="u")
        private_pg.start()
        assert service.spool.write() == 3
        assert service.before_summarization(chat("f3"), thread_id="t", user_id="u")
    text = queued_threads(memory_url)[("default", "t")]
    assert [text.index(f"f{n}") for n in range(4)] == sorted(text.index(f"f{n}") for n in range(4))


def test_a_live_process_keeps_its_spool_file_and_a_dead_ones_file_is_adopted(tmp_path):
    first = claim_slot(tmp_path)
    second = claim_slot(tmp_path)
    assert first.path != second.path
    item = Enqueued(Scope.of(user_id="u"), "t", (Message("user", "hi"),), Signals())
    first.append([(item, utcnow())])
    assert list(orphans(tmp_path)) == []  # both are owned (the second is empty anyway)
    first.close()
    adopted = list(orphans(tmp_path))
    assert [j.path for j in adopted] == [first.path]
    assert [s.item.thread_id for s in adopted[0].take(10)] == ["t"]
    for journal in (*adopted, second):
        journal.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_add_many_leaves_the_queue_as_the_same_adds_one_by_one(backend, tmp_path, request):
    def scoped(user: str) -> Scope:
        return Scope.of(user_id=user)

    def turn(text: str) -> tuple[Message, ...]:
        return (Message("user", text), Message("assistant", "ok " + text))

    items = [
        Enqueued(scoped("a"), "t1", turn("one"), Signals(correction=True)),
        Enqueued(scoped("b"), "t1", turn("two"), Signals()),
        Enqueued(scoped("a"), "t1", turn("three"), Signals(reinforcement=True)),
        Enqueued(scoped("a"), "t1", turn("f1"), Signals(), immediate=True),
        Enqueued(scoped("a"), "t1", turn("f2"), Signals(), immediate=True),
        Enqueued(scoped("c"), "t9", turn("four"), Signals()),
    ]
    from memory_sql.models import utcnow

    now = utcnow()
    tables = []
    for name, batched in (("one.db", False), ("many.db", True)):
        if backend == "sqlite":
            engine = create_engine(f"sqlite:///{tmp_path / name}")
        else:
            engine = create_engine(request.getfixturevalue("new_pg_database")())
        migrations.upgrade(engine)
        queue = UpdateQueue(engine, QueueSettings(debounce_seconds=5))
        earlier = Enqueued(scoped("c"), "t9", turn("zero"), Signals(correction=True))
        queue.add(earlier.scope, earlier.thread_id, earlier.messages, earlier.signals, now=now)
        if batched:
            queue.add_many(items, now=now)
        else:
            for item in items:
                queue.add(
                    item.scope,
                    item.thread_id,
                    item.messages,
                    item.signals,
                    immediate=item.immediate,
                    now=now,
                )
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(pending).order_by(pending.c.user_id, pending.c.kind)
            ).all()
        tables.append([tuple(row) for row in rows])
        engine.dispose()
    assert tables[0] == tables[1]
    assert len(tables[0]) == 4
    generations = {row[1]: row[11] for row in tables[0] if row[4] == "turn"}
    assert generations == {"a": 2, "b": 1, "c": 2}


def test_a_conversation_the_queue_refuses_stays_spooled_and_holds_back_no_other(
    own_pg_url, llm, tmp_path
):
    # A rule of the operator's, in the database: the queue refuses one thread (the database
    # answers, so it is not an outage).
    engine = create_engine(own_pg_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.thread_id = 'poison' THEN RAISE EXCEPTION 'no poison here'; END IF; "
                "RETURN NEW; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON memory_pending_updates "
                "FOR EACH ROW EXECUTE FUNCTION refuse_poison()"
            )
        )
    engine.dispose()
    spool = tmp_path / "spool"
    config = llm_config(llm, storage=own_pg_url, spool_dir=spool, spool_retry_seconds=600)
    with MemoryService(config, start=False) as service:
        assert service.after_agent(chat("tea"), thread_id="poison", user_id="u") is True
        assert len(service.spool) == 1  # refused by the queue: kept in the spool
        for n in range(3):  # the failure looked like an outage: these are spooled behind it
            assert service.after_agent(chat(f"t{n}"), thread_id=f"t{n}", user_id="u")
        assert service.spool.write() == 3
        assert len(service.spool) == 1  # kept on disk, not dropped, skipped
        assert service.after_agent(chat("later"), thread_id="later", user_id="u")
        assert len(service.spool) == 1  # the database answers again: straight to the queue
    expected = {("default", t) for t in ("t0", "t1", "t2", "later")}
    assert set(queued_threads(own_pg_url)) == expected


@pytest.mark.slow
def test_after_agent_from_8_threads_through_a_restart_keeps_every_true(
    private_pg, memory_url, llm, tmp_path
):
    import threading
    import time

    config = llm_config(llm, storage=memory_url, spool_dir=tmp_path / "spool")
    accepted: list[set[str]] = [set() for _ in range(8)]
    stop = threading.Event()
    with MemoryService(config, start=False) as service:

        def agent(number: int) -> None:
            sent = 0
            while not stop.is_set():
                thread = f"a{number}-{sent}"
                sent += 1
                if service.after_agent(chat("tea"), thread_id=thread, user_id=f"u{number}"):
                    accepted[number].add(thread)

        agents = [threading.Thread(target=agent, args=(n,)) for n in range(8)]
        for thread in agents:
            thread.start()
        time.sleep(2)
        private_pg.restart()
        time.sleep(3)
        stop.set()
        for thread in agents:
            thread.join(30)
        deadline = time.monotonic() + 30
        while len(service.spool) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(service.spool) == 0
    kept = {thread for _tenant, thread in queued_threads(memory_url)}
    true = set().union(*accepted)
    print(f"after_agent through a restart: {len(true)} True, {len(true & kept)} kept")
    assert len(true) > 500
    assert true - kept == set(), f"{len(true - kept)} of {len(true)} lost"
