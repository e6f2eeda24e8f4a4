"""The durable update queue on its own: debounce arithmetic, merging, leases, retries."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from conftest import assert_no_checked_out_connections

from memory_sql.config import QueueSettings
from memory_sql.database import create_engine
from memory_sql.errors import LeaseLostError
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.queue import UpdateQueue
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.scope import Scope

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest):
    url = request.getfixturevalue(f"{request.param}_url")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    yield engine
    assert_no_checked_out_connections(engine)
    engine.dispose()


def make_queue(engine, **settings) -> UpdateQueue:
    defaults = {
        "debounce_seconds": 30,
        "max_debounce_seconds": 300,
        "lease_seconds": 60,
        "max_attempts": 3,
        "retry_backoff_seconds": 10,
    }
    owner = settings.pop("owner", None)
    return UpdateQueue(engine, QueueSettings(**(defaults | settings)), owner=owner)


def conversation(text: str) -> list[Message]:
    return [Message("user", text), Message("assistant", f"reply to {text}")]


SCOPE = Scope.of(user_id="alice", agent_name="coder")
BOB = Scope.of(user_id="bob", agent_name="coder")


def rows(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(sa.select(pending).order_by(pending.c.thread_id)).all()


def test_a_newer_conversation_replaces_the_older_and_signals_merge(engine):
    queue = make_queue(engine)
    queue.add(SCOPE, "t1", conversation("one"), Signals(), now=T0)
    queue.add(SCOPE, "t1", conversation("two"), Signals(correction=True), now=T0 + timedelta(1))
    due = queue.add(
        SCOPE, "t1", conversation("three"), Signals(reinforcement=True), now=T0 + timedelta(2)
    )
    (row,) = rows(engine)
    assert "three" in row.messages and "one" not in row.messages
    assert (row.correction, row.reinforcement) == (True, False)
    assert row.generation == 3
    assert row.first_enqueued_at == T0
    assert due == row.due_at


def test_due_is_debounced_but_never_later_than_the_maximum_wait(engine):
    queue = make_queue(engine, debounce_seconds=30, max_debounce_seconds=100)
    assert queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0) == T0 + timedelta(
        seconds=30
    )
    later = T0 + timedelta(seconds=20)
    assert queue.add(SCOPE, "t1", conversation("b"), Signals(), now=later) == later + timedelta(
        seconds=30
    )
    late = T0 + timedelta(seconds=90)
    assert queue.add(SCOPE, "t1", conversation("c"), Signals(), now=late) == T0 + timedelta(
        seconds=100
    )


def test_keys_are_separate(engine):
    queue = make_queue(engine)
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    queue.add(SCOPE, "t2", conversation("b"), Signals(), now=T0)
    queue.add(Scope.of(user_id="bob", agent_name="coder"), "t1", conversation("c"), Signals())
    queue.add(Scope.of(user_id="alice"), "t1", conversation("d"), Signals())
    queue.add(
        Scope.of(user_id="alice", agent_name="coder", tenant_id="acme"),
        "t1",
        conversation("e"),
        Signals(),
    )
    assert len(rows(engine)) == 5


def test_a_summarization_flush_is_due_now_and_kept_apart_from_the_turn(engine):
    queue = make_queue(engine)
    queue.add(SCOPE, "t1", conversation("turn"), Signals(), now=T0)
    due = queue.add(
        SCOPE, "t1", conversation("about to be summarised"), Signals(), immediate=True, now=T0
    )
    assert due == T0
    kinds = {row.kind: row for row in rows(engine)}
    assert set(kinds) == {"flush", "turn"}
    assert "summarised" in kinds["flush"].messages and "turn" in kinds["turn"].messages
    assert [item.kind for item in queue.claim(5, now=T0)] == ["flush"]


def test_claim_leases_due_rows_once(engine):
    mine, theirs = make_queue(engine, owner="mine"), make_queue(engine, owner="theirs")
    mine.add(SCOPE, "t1", conversation("a"), Signals(correction=True), now=T0)
    assert mine.claim(5, now=T0) == []  # not due yet
    due = T0 + timedelta(seconds=30)
    (item,) = mine.claim(5, now=due)
    assert (item.thread_id, item.attempts, item.signals.correction) == ("t1", 1, True)
    assert [m.text for m in item.messages] == ["a", "reply to a"]
    assert theirs.claim(5, now=due) == []
    assert mine.counts(now=due) == {"pending": 1, "failed": 0, "leased": 1, "due": 0}
    after_lease = due + timedelta(seconds=61)  # the owner died: its lease runs out
    (again,) = theirs.claim(5, now=after_lease)
    assert again.attempts == 2
    with pytest.raises(LeaseLostError):  # the lease is no longer ours
        mine.complete(item)
    assert theirs.complete(again) is True
    assert rows(engine) == []


def test_a_conversation_arriving_during_a_run_is_kept_for_the_next(engine):
    queue = make_queue(engine, debounce_seconds=0)
    queue.add(SCOPE, "t1", conversation("first"), Signals(), now=T0)
    (item,) = queue.claim(1, now=T0)
    queue.add(SCOPE, "t1", conversation("second"), Signals(), now=T0)
    assert queue.complete(item) is False
    (row,) = rows(engine)
    assert "second" in row.messages and row.lease_owner is None and row.attempts == 0
    (next_item,) = queue.claim(1, now=T0 + timedelta(seconds=1))
    assert [m.text for m in next_item.messages][0] == "second"
    assert queue.complete(next_item) is True


def test_failures_back_off_then_stay_failed_with_their_error(engine):
    queue = make_queue(engine, debounce_seconds=0, max_attempts=3, retry_backoff_seconds=10)
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    now = T0
    outcomes, gaps = [], []
    for _ in range(3):
        (item,) = queue.claim(1, now=now)
        outcomes.append(queue.fail(item, f"boom {item.attempts}", now=now))
        (row,) = rows(engine)
        gaps.append((row.due_at - now).total_seconds())
        now = row.due_at
    assert outcomes == ["retry", "retry", "failed"]
    assert gaps[:2] == [10.0, 20.0]
    (row,) = rows(engine)
    assert (row.status, row.last_error, row.lease_owner) == ("failed", "boom 3", None)
    assert queue.claim(1, now=now + timedelta(days=1)) == []
    assert queue.counts(now=now)["failed"] == 1
    queue.add(SCOPE, "t1", conversation("new"), Signals(), now=now)  # new content, new chances
    (row,) = rows(engine)
    assert (row.status, row.attempts, row.last_error) == ("pending", 0, None)


def test_a_failure_after_a_newer_conversation_defers_to_it(engine):
    queue = make_queue(engine, debounce_seconds=0)
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    (item,) = queue.claim(1, now=T0)
    queue.add(SCOPE, "t1", conversation("b"), Signals(), now=T0)
    assert queue.fail(item, "llm down", now=T0) == "superseded"
    (row,) = rows(engine)
    assert (row.status, row.attempts, row.lease_owner) == ("pending", 0, None)


def test_next_due_and_make_all_due(engine):
    queue = make_queue(engine, debounce_seconds=30)
    assert queue.next_due(now=T0) is None
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    queue.add(BOB, "t2", conversation("b"), Signals(), now=T0 + timedelta(seconds=5))
    assert queue.next_due(now=T0) == T0 + timedelta(seconds=30)
    assert queue.make_all_due(now=T0) == 2
    other = make_queue(engine, owner="other")
    assert len(other.claim(5, now=T0)) == 2
    assert queue.next_due(now=T0) == T0 + timedelta(seconds=60)  # the other's leases end
    assert other.next_due(now=T0) is None  # its own runs renew their leases


def test_release_gives_a_row_back_without_counting_the_attempt(engine):
    queue = make_queue(engine, debounce_seconds=0)
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    (item,) = queue.claim(1, now=T0)
    queue.release(item)
    (again,) = queue.claim(1, now=T0)
    assert again.attempts == 1


def test_racing_claimers_never_share_a_row(engine):
    seed = make_queue(engine, debounce_seconds=0)
    for n in range(120):
        user = Scope.of(user_id=f"user{n % 12}", agent_name="coder")
        seed.add(user, f"t{n:03d}", conversation(str(n)), Signals(), now=T0)
    claimed: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def claimer(owner: str) -> None:
        queue = make_queue(engine, owner=owner)
        start.wait()
        while items := queue.claim(3, now=T0 + timedelta(seconds=1)):
            with lock:
                claimed.extend(item.thread_id for item in items)
            for item in items:
                queue.complete(item)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 120
    assert len(set(claimed)) == 120


def test_racing_claimers_run_one_update_of_a_memory_at_a_time(engine):
    seed = make_queue(engine, debounce_seconds=0)
    for n in range(40):
        seed.add(SCOPE, f"t{n:03d}", conversation(str(n)), Signals(), now=T0)
    seed.add(BOB, "bob-thread", conversation("bob"), Signals(), now=T0)
    held: set[Scope] = set()
    overlaps: list[str] = []
    done: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def claimer(owner: str) -> None:
        queue = make_queue(engine, owner=owner)
        start.wait()
        idle_rounds = 0
        while len(done) < 41 and idle_rounds < 2000:
            items = queue.claim(4, now=T0 + timedelta(seconds=1))
            if not items:
                idle_rounds += 1
                threading.Event().wait(0.002)
                continue
            idle_rounds = 0
            with lock:
                for item in items:
                    if item.scope in held:
                        overlaps.append(item.thread_id)
                    held.add(item.scope)
            assert len({item.scope for item in items}) == len(items)  # one per memory
            for item in items:
                with lock:
                    held.discard(item.scope)  # before its completion commits
                    done.append(item.thread_id)
                queue.complete(item)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert sorted(done) == sorted([f"t{n:03d}" for n in range(40)] + ["bob-thread"])
    assert rows(engine) == []


def test_a_memory_with_a_running_update_is_not_due_for_the_next_wake(engine):
    mine, theirs = make_queue(engine, owner="mine"), make_queue(engine, owner="theirs")
    mine.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    mine.add(SCOPE, "t2", conversation("b"), Signals(), now=T0 + timedelta(seconds=1))
    due = T0 + timedelta(seconds=40)
    (item,) = mine.claim(5, now=due)
    assert theirs.claim(5, now=due) == []  # t2 waits for t1's run
    assert mine.next_due(now=due) is None  # our own run's end wakes us, not a timer
    assert theirs.next_due(now=due) == item_lease_end(engine, item)
    mine.complete(item)
    (second,) = theirs.claim(5, now=due)
    assert second.thread_id == "t2"


def item_lease_end(engine, item) -> datetime:
    with engine.connect() as conn:
        return conn.execute(
            sa.select(pending.c.lease_until).where(pending.c.thread_id == item.thread_id)
        ).scalar_one()


def test_a_conflicted_run_is_postponed_with_its_reply_and_its_attempt_not_counted(engine):
    queue = make_queue(engine, debounce_seconds=0)
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    (item,) = queue.claim(1, now=T0)
    assert item.attempts == 1 and item.reply is None
    assert queue.postpone(item, '{"reply": 1}', 2.0, "version conflicts", now=T0)
    assert queue.claim(1, now=T0 + timedelta(seconds=1)) == []
    (again,) = queue.claim(1, now=T0 + timedelta(seconds=2))
    assert again.attempts == 1 and again.reply == '{"reply": 1}'
    assert queue.postpone(again, '{"reply": 2}', 0.0, "version conflicts", now=T0)
    queue.add(SCOPE, "t1", conversation("b"), Signals(), now=T0)  # a newer conversation
    (fresh,) = queue.claim(1, now=T0 + timedelta(seconds=3))
    assert fresh.reply is None  # the reply was for the older conversation
    assert not make_queue(engine, owner="else").postpone(fresh, "{}", 0.0, "x")


def test_the_same_flush_added_twice_is_kept_once(engine):
    queue = make_queue(engine)
    queue.add(SCOPE, "t1", conversation("dropped"), Signals(), immediate=True, now=T0)
    queue.add(SCOPE, "t1", conversation("dropped"), Signals(), immediate=True, now=T0)
    (item,) = queue.claim(1, now=T0)
    assert [m.text for m in item.messages if m.role == "user"] == ["dropped"]


def test_flushes_of_a_thread_accumulate_until_claimed(engine):
    queue = make_queue(engine)
    queue.add(SCOPE, "t1", conversation("dropped first"), Signals(), immediate=True, now=T0)
    queue.add(SCOPE, "t1", conversation("dropped second"), Signals(), immediate=True, now=T0)
    (item,) = queue.claim(1, now=T0)
    assert [m.text for m in item.messages if m.role == "user"] == [
        "dropped first",
        "dropped second",
    ]
    queue.add(SCOPE, "t1", conversation("dropped third"), Signals(), immediate=True, now=T0)
    assert queue.complete(item) is False  # the third arrived while the first two ran
    (next_item,) = queue.claim(1, now=T0)
    assert [m.text for m in next_item.messages if m.role == "user"] == ["dropped third"]


def test_renewing_keeps_a_long_run_from_being_claimed_again(engine):
    mine, theirs = make_queue(engine, owner="mine"), make_queue(engine, owner="theirs")
    mine.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    due = T0 + timedelta(seconds=30)
    (item,) = mine.claim(1, now=due)
    later = due + timedelta(seconds=50)
    assert mine.renew([item], now=later) == 1
    assert theirs.claim(1, now=due + timedelta(seconds=61)) == []  # past the first lease
    assert len(theirs.claim(1, now=later + timedelta(seconds=61))) == 1  # renewals stopped


def test_a_failed_flush_superseded_by_another_keeps_both(engine):
    queue = make_queue(engine)
    queue.add(SCOPE, "t1", conversation("dropped A"), Signals(), immediate=True, now=T0)
    (item,) = queue.claim(1, now=T0)
    queue.add(SCOPE, "t1", conversation("dropped B"), Signals(), immediate=True, now=T0)
    assert queue.fail(item, "llm down", now=T0) == "superseded"
    (again,) = queue.claim(1, now=T0)
    assert [m.text for m in again.messages if m.role == "user"] == ["dropped A", "dropped B"]


def test_the_maximum_wait_restarts_after_a_run(engine):
    queue = make_queue(engine, debounce_seconds=30, max_debounce_seconds=100)
    queue.add(SCOPE, "t1", conversation("a"), Signals(), now=T0)
    run_at = T0 + timedelta(seconds=100)
    (item,) = queue.claim(1, now=run_at)
    during = run_at + timedelta(seconds=5)
    queue.add(SCOPE, "t1", conversation("b"), Signals(), now=during)
    assert queue.complete(item) is False
    after = during + timedelta(seconds=10)
    due = queue.add(SCOPE, "t1", conversation("c"), Signals(), now=after)
    assert due == after + timedelta(seconds=30)  # debounced again, not overdue at once


def test_an_unreadable_row_fails_alone_and_blocks_nothing(engine):
    queue = make_queue(engine, debounce_seconds=0)
    queue.add(SCOPE, "bad", conversation("x"), Signals(), now=T0)
    queue.add(SCOPE, "good", conversation("y"), Signals(), now=T0 + timedelta(seconds=1))
    with engine.begin() as conn:
        conn.execute(
            sa.update(pending).where(pending.c.thread_id == "bad").values(messages='[{"role": 7}]')
        )
    claimed = queue.claim(5, now=T0 + timedelta(seconds=2))
    assert [item.thread_id for item in claimed] == ["good"]
    bad = next(row for row in rows(engine) if row.thread_id == "bad")
    assert bad.status == "failed" and "unreadable" in bad.last_error


def test_a_row_whose_runs_keep_dying_is_given_up(engine):
    queue = make_queue(engine, debounce_seconds=0, max_attempts=2, lease_seconds=10)
    queue.add(SCOPE, "t1", conversation("x"), Signals(), now=T0)
    now = T0
    for _ in range(2):  # each run's process dies: the lease just runs out
        assert len(queue.claim(1, now=now)) == 1
        now += timedelta(seconds=11)
    assert queue.claim(1, now=now) == []
    (row,) = rows(engine)
    assert row.status == "failed" and "never finished" in row.last_error


@pytest.mark.postgres
def test_an_add_racing_a_completed_run_is_not_lost(pg_url):
    engine = create_engine(pg_url)
    other = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.delete(pending))
        queue = make_queue(engine, debounce_seconds=0)
        queue.add(SCOPE, "t1", conversation("first"), Signals(), now=T0)
        (item,) = queue.claim(1, now=T0)
        worker = make_queue(other, owner=queue.owner)
        completed = []

        def complete_between_insert_and_select(conn, cursor, statement, *args):
            if "FOR UPDATE" in statement and not completed:
                completed.append(worker.complete(item))  # the run ends at the worst moment

        sa.event.listen(engine, "before_cursor_execute", complete_between_insert_and_select)
        queue.add(SCOPE, "t1", conversation("second"), Signals(), now=T0)
        sa.event.remove(engine, "before_cursor_execute", complete_between_insert_and_select)
        assert completed == [True]
        (row,) = rows(engine)
        assert "second" in row.messages and row.generation == 1
    finally:
        engine.dispose()
        other.dispose()


class _SlowClaims(UpdateQueue):
    """A real queue whose claims take a while, so that a stop can land in the middle of one."""

    def __init__(self, engine, claiming: threading.Event, **settings) -> None:
        owner = settings.pop("owner", None)
        super().__init__(engine, QueueSettings(**settings), owner=owner)
        self.claiming = claiming

    def claim(self, limit, *, now=None):
        items = super().claim(limit, now=now)
        if items:
            self.claiming.set()
            threading.Event().wait(0.5)
        return items


def test_a_stop_during_a_claim_gives_the_claimed_rows_back(engine):
    from memory_sql.queue import RunOutcome, UpdateWorker

    seed = make_queue(engine, debounce_seconds=0)
    seed.add(SCOPE, "t1", conversation("a"), Signals())
    claiming = threading.Event()
    queue = _SlowClaims(engine, claiming, debounce_seconds=0, owner="stopping")
    runs: list[str] = []
    worker = UpdateWorker(queue, lambda item: runs.append(item.thread_id) or RunOutcome(True))
    worker.start()
    assert claiming.wait(10)
    assert worker.stop(timeout=5) is True  # it waited for the claim, then gave the row back
    (row,) = rows(engine)
    assert row.lease_owner is None and row.attempts == 0
    assert runs == []


def test_quick_runs_claim_a_pool_ahead_and_a_stop_gives_those_rows_back(engine):
    """Once runs are quick, a claim takes as many rows again as the pool has threads; rows
    claimed ahead wait here, leased, and a stop gives them back unrun."""
    import time

    from memory_sql.queue import RunOutcome, UpdateWorker

    queue = make_queue(engine, debounce_seconds=0, owner="ahead")
    for n in range(6):  # six memories: one claim may take a row of each
        queue.add(Scope.of(user_id=f"u{n}"), "t", conversation("a"), Signals())
    hold = threading.Event()
    started: list[str] = []

    def run(item):
        started.append(item.scope.user_id)
        if len(started) > 1:  # the first run is quick; the others wait for the test
            hold.wait(20)
        return RunOutcome(True)

    worker = UpdateWorker(queue, run, workers=2)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (len(started) == 3 and worker.in_flight == 4):
            time.sleep(0.02)
        # 1 done; 2 running; 2 claimed ahead for the 2 threads; 1 left in the queue
        assert (len(started), worker.in_flight) == (3, 4)
        leased = [row for row in rows(engine) if row.lease_owner == "ahead"]
        assert len(leased) == 4
        assert worker.stop(timeout=0.2) is False  # the two running ones still hold the test
        leased = [row for row in rows(engine) if row.lease_owner == "ahead"]
        assert len(leased) == 2 and len(rows(engine)) == 5
    finally:
        hold.set()
        worker.stop(timeout=10)
    assert len(started) == 3  # the rows claimed ahead never ran
