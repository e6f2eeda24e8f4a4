"""Wake-ups across processes (memory_sql.storage.wakeups): a separate ``memory-sql worker`` learns a
conversation another process queued within seconds, not at its 60 s sweep, on both databases;
the PostgreSQL listener comes back after its connection is killed; a debounced row runs at its
due time; revision 0013's triggers notify only for claimable rows, and go with a downgrade."""

from __future__ import annotations

import importlib.util
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from server.service_process import ServiceProcess
from server.test_row_level_security import app_role as app_role  # a fixture
from test_service import chat, learn
from worker_process import WorkerProcess

from memory_sql import MemoryConfig, migrations
from memory_sql.database import create_engine
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.models import utcnow
from memory_sql.queue import UpdateQueue
from memory_sql.scope import Scope
from memory_sql.server.keys import create_key
from memory_sql.service import MemoryService
from memory_sql.storage.wakeups import LISTENER_NAME, ChangePoller, NotifyListener, due_time

ROOT = Path(__file__).resolve().parent.parent
SWEEP = 60.0  # the default: a wake-up within seconds cannot be the sweep's
PROMPT_WAKE = 20.0  # seconds: well below the sweep, with room for a loaded machine (the first
# update of a process imports openai and builds its client: seconds when the cores are busy)
TURN = [Message("user", "I like tea"), Message("assistant", "Noted: tea.")]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    """A database of the test's own (the listener is found by its database's name)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "own_pg_url")


def worker_settings(url: str, llm) -> dict:
    return {
        "storage": url,
        "model_name": "test-model",
        "llm_base_url": llm.base_url,
        "llm_api_key": "sk-test",
        "llm_max_retries": 0,
        "llm_timeout_seconds": 10.0,
        "token_counting": False,
        "sweep_interval_seconds": SWEEP,
        "workers": 1,
    }


def poster(url: str, llm, *, debounce: float = 0.0) -> MemoryService:
    """The API's side of the layout: a service that queues conversations and runs none."""
    config = MemoryConfig(
        storage=url,
        model_name="test-model",
        llm_base_url=llm.base_url,
        debounce_seconds=debounce,
        token_counting=False,
    )
    return MemoryService(config, start=False)


def learned_at(service: MemoryService, user: str, fact: str, seconds: float, log) -> float:
    """When (time.monotonic) ``fact`` is in ``user``'s memory, looking every 20 ms."""
    deadline = time.monotonic() + seconds
    while True:
        if fact in [f.content for f in service.storage.load(user_id=user).facts]:
            return time.monotonic()
        if time.monotonic() > deadline:
            pytest.fail(f"{fact!r} not learned within {seconds} s; worker log:\n{log()}")
        time.sleep(0.02)


def listener_pids(url: str) -> list[int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                        "AND datname = current_database()"
                    ),
                    {"name": LISTENER_NAME},
                ).scalars()
            )
    finally:
        engine.dispose()


def wait_for(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return found


def wait_until_listening(url: str) -> None:
    if url.startswith("postgresql"):
        wait_for(lambda: listener_pids(url), 10, "the worker's listener never connected")
    else:
        time.sleep(0.5)  # two polls of the change counter: the poller has its first reading


def test_a_separate_worker_learns_an_immediate_conversation_within_seconds(url, llm, tmp_path):
    llm.responder = learn
    with WorkerProcess(tmp_path, worker_settings(url, llm)) as worker, poster(url, llm) as api:
        wait_until_listening(url)
        time.sleep(1.0)  # the worker's start-up look has long ended: only a wake-up is left
        posted = time.monotonic()
        assert api.queue_conversation(chat("tea"), thread_id="t1", user_id="u1", immediate=True)
        took = learned_at(api, "u1", "Likes tea", PROMPT_WAKE, lambda: worker.log) - posted
        assert took < PROMPT_WAKE < SWEEP
        # A second one, once the first is done: the wake-ups go on, not only the first.
        posted = time.monotonic()
        assert api.queue_conversation(chat("rye"), thread_id="t2", user_id="u1", immediate=True)
        learned_at(api, "u1", "Likes rye", PROMPT_WAKE, lambda: worker.log)
        assert worker.stop() == 0
    assert len(llm.requests) == 2


def test_a_debounced_conversation_is_learned_at_its_due_time(url, llm, tmp_path):
    llm.responder = learn
    debounce = 2.0
    with (
        WorkerProcess(tmp_path, worker_settings(url, llm)) as worker,
        poster(url, llm, debounce=debounce) as api,
    ):
        wait_until_listening(url)
        posted = time.monotonic()
        assert api.after_agent(chat("tea"), thread_id="t1", user_id="u1")
        took = learned_at(api, "u1", "Likes tea", debounce + PROMPT_WAKE, lambda: worker.log)
        took -= posted
        assert debounce - 0.1 <= took < debounce + PROMPT_WAKE, took


@pytest.mark.postgres
@pytest.mark.slow
def test_the_listener_reconnects_after_its_connection_is_killed(own_pg_url, llm, tmp_path):
    llm.responder = learn
    url = own_pg_url
    with WorkerProcess(tmp_path, worker_settings(url, llm)) as worker, poster(url, llm) as api:
        (first,) = wait_for(lambda: listener_pids(url), 10, "no listener")
        engine = create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": first}).scalar()
        engine.dispose()
        (second,) = wait_for(
            lambda: [p for p in listener_pids(url) if p != first], 10, "no new listener"
        )
        assert second != first
        time.sleep(0.5)
        posted = time.monotonic()
        assert api.queue_conversation(chat("tea"), thread_id="t1", user_id="u1", immediate=True)
        took = learned_at(api, "u1", "Likes tea", PROMPT_WAKE, lambda: worker.log) - posted
        assert took < PROMPT_WAKE
        assert worker.stop() == 0
    assert "Traceback" not in worker.log


@pytest.mark.postgres
@pytest.mark.slow
def test_after_an_outage_the_listener_is_back_and_what_it_missed_is_learned(
    private_pg, llm, tmp_path
):
    """The server restarted: the listener reconnects (with back-off) and, since a notification
    sent while it had no connection is lost, looks at the queue once it is back."""
    llm.responder = learn
    url = private_pg.create_database("memory")
    migrations.upgrade(url)
    with WorkerProcess(tmp_path, worker_settings(url, llm)) as worker:
        (first,) = wait_for(lambda: listener_pids(url), 10, "no listener")
        private_pg.restart()
        with poster(url, llm) as api:  # queued at once: the listener may well not be back
            assert api.queue_conversation(chat("tea"), thread_id="t1", user_id="u1", immediate=True)
            learned_at(api, "u1", "Likes tea", PROMPT_WAKE, lambda: worker.log)
        (second,) = wait_for(lambda: listener_pids(url), 10, "the listener did not come back")
        assert second != first
        assert worker.stop() == 0


@pytest.mark.postgres
def test_under_row_level_security_the_app_role_api_wakes_the_app_role_worker(
    app_role, llm, tmp_path
):
    """The README's layout as docker-compose runs it: ``serve --no-worker`` and a separate
    worker, both as the role ``db grant`` prepares (row-level security applies to it)."""
    llm.responder = learn
    owner = create_engine(app_role.owner_url)
    key = create_key(owner, tenant_id="acme", role="write")[1]
    owner.dispose()
    settings = worker_settings(app_role.url, llm)
    with (
        WorkerProcess(tmp_path, settings) as worker,
        ServiceProcess(tmp_path, settings, with_worker=False) as api,
        api.client(key) as client,
    ):
        wait_for(lambda: listener_pids(app_role.owner_url), 10, "no listener")
        time.sleep(1.0)
        posted = time.monotonic()
        sent = client.post(
            "/v1/conversations",
            json={"user_id": "u1", "thread_id": "t1", "messages": chat("tea"), "immediate": True},
        )
        assert sent.status_code == 202, sent.text
        deadline = posted + PROMPT_WAKE
        while client.get("/v1/users/u1/facts").status_code == 404 or not [
            f["content"] for f in client.get("/v1/users/u1/facts").json()["facts"]
        ]:
            assert time.monotonic() < deadline, f"not learned; worker log:\n{worker.log}"
            time.sleep(0.05)
        facts = [f["content"] for f in client.get("/v1/users/u1/facts").json()["facts"]]
        assert facts == ["Likes tea"]
        assert worker.stop() == 0


# --- the sources in this process ------------------------------------------------------------


@pytest.mark.postgres
def test_the_trigger_notifies_rows_made_claimable_or_due_sooner_only(own_pg_url):
    engine = create_engine(own_pg_url)
    got: list = []
    connected = threading.Event()
    listener = NotifyListener(engine, got.append, connected.set)
    listener.start()
    try:
        assert connected.wait(10)
        queue = UpdateQueue(engine, debounce_seconds=30)
        due = queue.add(Scope.of(user_id="u1"), "t1", TURN, Signals())
        wait_for(lambda: got, 5, "no notification for a queued conversation")
        assert abs((got[0] - due).total_seconds()) < 1e-3
        queue.add(Scope.of(user_id="u1"), "t1", TURN, Signals())  # merged: due later
        time.sleep(0.5)
        assert len(got) == 1  # who heard of the earlier time wakes then and finds this one
        queue.make_all_due()
        wait_for(lambda: len(got) == 2, 5, "no notification for a flush")
        (item,) = queue.claim(1)
        queue.renew([item])
        time.sleep(0.5)
        assert len(got) == 2  # a claim and a renewal make nothing claimable
        queue.fail(item, "boom")  # back-off: due again later
        wait_for(lambda: len(got) == 3, 5, "no notification for a retry")
        assert got[2] > utcnow() + timedelta(seconds=20)
        with engine.begin() as conn:  # rolled back: nothing is sent
            conn.execute(sa.text("UPDATE memory_pending_updates SET due_at = now()"))
            conn.rollback()
        time.sleep(0.5)
        assert len(got) == 3
    finally:
        listener.stop()
        engine.dispose()


def test_the_sqlite_poller_sees_commits_of_other_connections(sqlite_url):
    engine = create_engine(sqlite_url)
    looks = threading.Semaphore(0)
    poller = ChangePoller(Path(engine.url.database), looks.release, interval=0.05)
    poller.start()
    try:
        assert looks.acquire(timeout=5)  # the first reading looks once
        assert not looks.acquire(timeout=0.3)  # nothing changed: no look
        UpdateQueue(engine).add(Scope.of(user_id="u1"), "t1", TURN, Signals())
        assert looks.acquire(timeout=5)
        assert poller.changes == 1
    finally:
        poller.stop()
        engine.dispose()


def test_an_unreadable_payload_means_now():
    before = utcnow()
    assert due_time("not a time") >= before
    assert due_time("1764637200.5").timestamp() == 1764637200.5


def test_revision_0013_upgrades_and_downgrades(url):
    spec = importlib.util.spec_from_file_location(
        "revision_0013", ROOT / "alembic" / "versions" / "0013_queue_notify.py"
    )
    assert spec and spec.loader
    revision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(revision)
    engine = create_engine(url)

    def triggers() -> set[str]:
        if engine.dialect.name != "postgresql":
            return set()
        with engine.connect() as conn:
            return set(
                conn.execute(
                    sa.text(
                        "SELECT tgname FROM pg_trigger "
                        "WHERE tgrelid = 'memory_pending_updates'::regclass AND NOT tgisinternal"
                    )
                ).scalars()
            )

    try:
        migrations.downgrade(engine, revision.down_revision)
        assert triggers() == set()
        migrations.upgrade(engine, revision.revision)
        expected = set(revision.TRIGGERS) if engine.dialect.name == "postgresql" else set()
        assert triggers() == expected
        migrations.downgrade(engine, revision.down_revision)
        assert triggers() == set()
    finally:
        engine.dispose()


def test_a_wake_up_whose_time_passed_does_not_hold_back_later_ones(sqlite_url):
    """A wake-up that fired while another was running went round in that one: its time,
    passed, must not make later wake-ups look covered (they would wait for the sweep)."""
    from memory_sql.queue import RunOutcome, UpdateWorker

    engine = create_engine(sqlite_url)
    queue = UpdateQueue(engine, debounce_seconds=0)
    ran = threading.Event()
    worker = UpdateWorker(queue, lambda item: ran.set() or RunOutcome(True), sweep_interval=SWEEP)
    worker.start()
    try:
        time.sleep(0.3)  # the start-up look is over
        with worker._lock:
            worker._next_wake = utcnow() - timedelta(seconds=1)  # as such a race leaves it
        due = queue.add(Scope.of(user_id="u1"), "t1", TURN, Signals())
        worker.notify(due)
        assert ran.wait(5), "the row waited for the sweep"
    finally:
        worker.stop(5)
        engine.dispose()
