"""The queue carries the threads' watermarks: a claim reads each row's watermark with the row
(no statement of its own in the run), and a completion moves it, on PostgreSQL in the DELETE's
own statement (a data-modifying CTE), everywhere in the save's transaction."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from conftest import assert_no_checked_out_connections

from memory_sql.config import QueueSettings
from memory_sql.database import create_engine
from memory_sql.errors import LeaseLostError
from memory_sql.intake.messages import Message
from memory_sql.intake.redact import Redactor
from memory_sql.intake.signals import Signals
from memory_sql.queue import UpdateQueue
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.scope import Scope
from memory_sql.storage import watermarks
from memory_sql.storage.dialects import dialect_of
from memory_sql.storage.watermarks import Mark
from memory_sql.tenancy import ALL_TENANTS, acting_for
from memory_sql.update import updater

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CHAT = [Message("user", "I like tea"), Message("assistant", "Noted.")]


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest):
    engine = create_engine(request.getfixturevalue(f"{request.param}_url"))
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    yield engine
    assert_no_checked_out_connections(engine)
    engine.dispose()


def _queue(engine, owner: str = "w1") -> UpdateQueue:
    return UpdateQueue(engine, QueueSettings(debounce_seconds=0, lease_seconds=60), owner=owner)


def _scope() -> Scope:
    return Scope.of(user_id=f"u-{uuid.uuid4().hex[:10]}", agent_name="coder")


def _statements(engine) -> tuple[list[str], object]:
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's, sent as a statement
            seen.append(" ".join(statement.split()))

    return seen, count


def test_a_claim_reads_each_rows_watermark_and_only_its_threads(engine):
    marked, plain = _scope(), _scope()
    queue = _queue(engine)
    watermarks.move(engine, marked, "t1", Mark("id:m7", 7))
    watermarks.move(engine, marked, "other-thread", Mark("id:x", 1))
    watermarks.move(engine, plain, "t9", Mark("id:y", 2))  # same user, another thread
    queue.add(marked, "t1", CHAT, Signals(), now=T0)
    queue.add(plain, "t1", CHAT, Signals(), now=T0)
    items = {item.scope: item for item in queue.claim(5, now=T0 + timedelta(seconds=1))}
    assert set(items) == {marked, plain}
    assert items[marked].mark_read and items[marked].mark == Mark("id:m7", 7)
    assert items[plain].mark_read and items[plain].mark is None


def test_completing_with_a_mark_moves_it_and_deletes_the_row(engine):
    scope = _scope()
    queue = _queue(engine)
    watermarks.move(engine, scope, "t", Mark("id:old", 1))
    queue.add(scope, "t", CHAT, Signals(), now=T0)
    (item,) = queue.claim(1, now=T0 + timedelta(seconds=1))
    seen, count = _statements(engine)
    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        with acting_for(ALL_TENANTS), engine.begin() as conn:
            assert queue.complete_on(conn, item, Mark("id:new", 3))
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    assert watermarks.load(engine, scope, "t") == Mark("id:new", 3)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar() == 0
    # PostgreSQL writes both in one statement; SQLite (no writes in CTEs) in two.
    expected = 1 if dialect_of(engine).writes_in_ctes else 2
    assert len(seen) == expected, seen
    if expected == 1:
        assert seen[0].startswith("WITH moved AS (INSERT INTO memory_watermarks")


def test_a_completion_that_lost_its_lease_leaves_the_watermark_as_it_was(engine):
    scope = _scope()
    queue, thief = _queue(engine, "w1"), _queue(engine, "w2")
    watermarks.move(engine, scope, "t", Mark("id:old", 1))
    queue.add(scope, "t", CHAT, Signals(), now=T0)
    (item,) = queue.claim(1, now=T0 + timedelta(seconds=1))
    # The lease ran out and another worker took the row.
    (taken,) = thief.claim(1, now=T0 + timedelta(seconds=120))
    assert taken.mark == Mark("id:old", 1)
    with pytest.raises(LeaseLostError), acting_for(ALL_TENANTS), engine.begin() as conn:
        queue.complete_on(conn, item, Mark("id:new", 3))
    assert watermarks.load(engine, scope, "t") == Mark("id:old", 1)
    with acting_for(ALL_TENANTS), engine.begin() as conn:
        assert thief.complete_on(conn, taken, Mark("id:thief", 2))
    assert watermarks.load(engine, scope, "t") == Mark("id:thief", 2)


def test_a_newer_conversation_keeps_the_row_and_the_mark_still_moves(engine):
    scope = _scope()
    queue = _queue(engine)
    queue.add(scope, "t", CHAT, Signals(), now=T0)
    (item,) = queue.claim(1, now=T0 + timedelta(seconds=1))
    queue.add(scope, "t", [*CHAT, *CHAT], Signals(), now=T0 + timedelta(seconds=2))
    with acting_for(ALL_TENANTS), engine.begin() as conn:
        assert not queue.complete_on(conn, item, Mark("id:run", 1))
    assert watermarks.load(engine, scope, "t") == Mark("id:run", 1)
    (again,) = queue.claim(1, now=T0 + timedelta(seconds=3))
    assert again.generation == item.generation + 1 and again.mark == Mark("id:run", 1)


def test_without_the_watermark_table_a_claim_reads_none(tmp_path):
    from memory_sql import migrations

    url = f"sqlite:///{tmp_path}/old.db"
    migrations.upgrade(url)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE memory_watermarks")  # an older schema
        queue = _queue(engine)
        queue.add(_scope(), "t", CHAT, Signals(), now=T0)
        (item,) = queue.claim(1, now=T0 + timedelta(seconds=1))
        assert not item.mark_read and item.mark is None
    finally:
        engine.dispose()


def test_the_fixed_system_message_is_redacted_once_per_redactor():
    redactor = Redactor()
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    system = f"You keep memories. password: {secret}"
    before = updater._redacted_once.cache_info().hits
    first = updater._redacted(redactor, system, "system")
    second = updater._redacted(redactor, system, "system")
    assert secret not in first and first == second == redactor(system)
    assert updater._redacted_once.cache_info().hits == before + 1
    # The user's message is redacted every time, never cached.
    misses = updater._redacted_once.cache_info().misses
    assert secret not in updater._redacted(redactor, f"my key {secret}", "user")
    assert updater._redacted_once.cache_info().misses == misses


def test_notices_of_a_burst_share_one_claim(engine):
    """A wake-up for work due now waits ``gather_seconds``: rows queued meanwhile, each with
    its own notice, are taken by one claim rather than a claim each."""
    import time

    from memory_sql.models import utcnow
    from memory_sql.queue import RunOutcome, UpdateWorker

    class CountedQueue(UpdateQueue):
        """The real queue, recording how many rows each claim took."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.taken: list[int] = []

        def claim(self, limit, *, now=None):
            items = super().claim(limit, now=now)
            self.taken.append(len(items))
            return items

    queue = CountedQueue(engine, QueueSettings(debounce_seconds=0, lease_seconds=60), owner="burst")
    done: list[str] = []
    worker = UpdateWorker(
        queue,
        lambda item: done.append(item.scope.user_id) or RunOutcome(True),
        workers=8,
        gather_seconds=2.0,
    )
    worker.start()
    try:
        scopes = [_scope() for _ in range(5)]
        for scope in scopes:  # five enqueues, each noticed at once
            queue.add(scope, "t", CHAT, Signals())
            worker.notify(utcnow())
            time.sleep(0.02)
        deadline = time.monotonic() + 20
        while len(done) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(done) == sorted(scope.user_id for scope in scopes)
        assert [n for n in queue.taken if n] == [5]
    finally:
        worker.stop(timeout=10)


def test_while_claims_come_back_full_a_finished_run_claims_again_at_once(engine):
    """The gather wait batches notices; it is skipped while the last claim found all it asked
    for (more rows are due): a backlog drains claim after claim, not a gather wait apart."""
    import time

    from memory_sql.models import utcnow
    from memory_sql.queue import RunOutcome, UpdateWorker

    queue = _queue(engine, owner="backlog")
    for _ in range(12):
        queue.add(_scope(), "t", CHAT, Signals())
    done: list[float] = []
    worker = UpdateWorker(
        queue,
        lambda item: done.append(time.monotonic()) or RunOutcome(True),
        workers=2,
        gather_seconds=1.0,
    )
    worker.start()
    try:
        worker.notify(utcnow())
        deadline = time.monotonic() + 30
        while len(done) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(done) == 12
        # after the first claim, the others (two to four rows each) wait no gather: with the
        # wait, 12 rows took a gather (1 s) per claim
        assert done[-1] - done[0] < 1.0, [round(t - done[0], 2) for t in done]
    finally:
        worker.stop(timeout=10)


def test_the_reply_schema_is_built_once_and_cannot_be_changed():
    from memory_sql.update.parser import update_json_schema

    first, second = updater._reply_schema(), updater._reply_schema()
    assert first is second and dict(first) == update_json_schema()
    with pytest.raises(TypeError):
        first["type"] = "array"  # type: ignore[index]
