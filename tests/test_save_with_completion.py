"""A memory's save carries the run's queue completion and LLM usage row (:class:`WithTheSave`):
on PostgreSQL inside the save's one statement, on SQLite in its transaction. Either way the
memory, the queue row, the watermark and the usage row move together or not at all: a lost
lease or a version conflict writes none of them."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from memory_sql.config import QueueSettings
from memory_sql.errors import LeaseLostError, VersionConflictError
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.models import Fact
from memory_sql.queue import UpdateQueue
from memory_sql.schema import memory_llm_calls, memory_pending_updates
from memory_sql.scope import Scope
from memory_sql.storage import SQLStorage, llm_usage, watermarks
from memory_sql.storage.base import Seen
from memory_sql.storage.dialects import dialect_of
from memory_sql.storage.watermarks import Mark
from memory_sql.tenancy import ALL_TENANTS, acting_for

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CHAT = [Message("user", "I like tea"), Message("assistant", "Noted.")]


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def storage(request: pytest.FixtureRequest):
    store = SQLStorage(request.getfixturevalue(f"{request.param}_url"))
    yield store
    store.close()


def _queue(storage: SQLStorage, owner: str) -> UpdateQueue:
    settings = QueueSettings(debounce_seconds=0, lease_seconds=60)
    return UpdateQueue(storage.engine, settings, owner=owner)


def _claimed(queue: UpdateQueue, scope: Scope):
    queue.add(scope, "t", CHAT, Signals(), now=T0)
    (item,) = queue.claim(1, now=T0 + timedelta(seconds=1))
    return item


def _call(scope: Scope) -> dict:
    return {
        "tenant_id": scope.tenant_id,
        "user_id": scope.user_id,
        "agent_name": scope.agent_key,
        "call_id": uuid.uuid4().hex,
        "thread_id": "t",
        "model": "m",
        "called_at": T0,
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "tokens_counted": True,
        "latency_ms": 7,
        "outcome": "ok",
        "error": None,
        "stale_offered": 2,
        "stale_removed": 1,
        "stale_extended": 0,
        "facts_merged": 0,
    }


def _save(storage, scope, queue, item, mark, facts, *, expected=None, call=None, saved=None):
    doc = storage.load(**scope.arguments())
    version = doc.version if expected is None else expected
    doc.facts = [*doc.facts, *(Fact(content=text) for text in facts)]
    done: list[str] = saved if saved is not None else []
    with_save = queue.completion(item, mark, lambda: done.append("completed"))
    if call is not None:
        usage = llm_usage.call_with_the_save(storage.engine, call, (), lambda: done.append("usage"))
        with_save = usage + with_save
    return storage.save(
        doc, **scope.arguments(), expected_version=version, in_transaction=with_save
    )


def _statements(engine, during):
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        seen.append(" ".join(statement.split()))

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        result = during()
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    return result, seen


def _queued(storage: SQLStorage, scope: Scope) -> list:
    rows = memory_pending_updates.c
    with acting_for(ALL_TENANTS), storage.engine.connect() as conn:
        return conn.execute(
            sa.select(rows.generation, rows.lease_owner).where(rows.user_id == scope.user_id)
        ).all()


def _calls(storage: SQLStorage, scope: Scope) -> list:
    with acting_for(ALL_TENANTS), storage.engine.connect() as conn:
        query = sa.select(memory_llm_calls).where(memory_llm_calls.c.user_id == scope.user_id)
        return [dict(row._mapping) for row in conn.execute(query)]


def _scope() -> Scope:
    return Scope.of(user_id=f"u-{uuid.uuid4().hex[:10]}", agent_name="coder")


def test_the_save_completes_the_row_moves_the_mark_and_records_the_call(storage):
    scope = _scope()
    queue = _queue(storage, "w1")
    item = _claimed(queue, scope)
    call, done = _call(scope), []
    version, seen = _statements(
        storage.engine,
        lambda: _save(
            storage, scope, queue, item, Mark("id:m", 2), ["Likes tea"], call=call, saved=done
        ),
    )
    assert version == 1 and done == ["usage", "completed"]
    assert [f.content for f in storage.load(**scope.arguments()).facts] == ["Likes tea"]
    assert _queued(storage, scope) == []
    assert watermarks.load(storage.engine, scope, "t") == Mark("id:m", 2)
    [row] = _calls(storage, scope)
    assert row["called_at"].astimezone(timezone.utc) == T0
    assert {k: v for k, v in row.items() if k != "called_at"} == {
        k: v for k, v in call.items() if k != "called_at"
    }
    writes = [s for s in seen if not s.startswith(("SELECT", "BEGIN", "COMMIT", "ROLLBACK"))]
    if dialect_of(storage.engine).writes_in_ctes:
        # the statements the engine saw, but for the driver's own (the one-statement save
        # goes through SQLAlchemy only while an event listens, as here): one statement
        assert len(writes) == 1, writes
        assert writes[0].startswith("WITH leased AS ( SELECT FROM memory_pending_updates")
    else:
        assert len(writes) >= 4, writes  # the claim, the fact, its event, the call, the row


def test_a_lost_lease_writes_nothing_of_the_save(storage):
    scope = _scope()
    queue, thief = _queue(storage, "w1"), _queue(storage, "w2")
    first = storage.load(**scope.arguments())
    first.facts = [Fact(content="Likes coffee")]
    storage.save(first, **scope.arguments())
    watermarks.move(storage.engine, scope, "t", Mark("id:old", 1))
    item = _claimed(queue, scope)
    (taken,) = thief.claim(1, now=T0 + timedelta(seconds=120))  # the lease ran out
    done: list[str] = []
    with pytest.raises(LeaseLostError):
        _save(
            storage,
            scope,
            queue,
            item,
            Mark("id:new", 3),
            ["Likes tea"],
            call=_call(scope),
            saved=done,
        )
    assert done == []
    memory = storage.load(**scope.arguments())
    assert (memory.version, [f.content for f in memory.facts]) == (1, ["Likes coffee"])
    assert _queued(storage, scope) == [(taken.generation, thief.owner)]
    assert watermarks.load(storage.engine, scope, "t") == Mark("id:old", 1)
    assert _calls(storage, scope) == []
    # the thief's run saves and completes as usual
    assert _save(storage, scope, thief, taken, Mark("id:thief", 2), ["Likes tea"]) == 2
    assert _queued(storage, scope) == []


def test_a_newer_conversation_keeps_the_row_released_and_the_mark_moves(storage):
    scope = _scope()
    queue = _queue(storage, "w1")
    item = _claimed(queue, scope)
    queue.add(scope, "t", [*CHAT, *CHAT], Signals(), now=T0 + timedelta(seconds=2))
    done: list[str] = []
    assert _save(storage, scope, queue, item, Mark("id:run", 1), ["Likes tea"], saved=done) == 1
    assert done == ["completed"]
    assert _queued(storage, scope) == [(item.generation + 1, None)]
    assert watermarks.load(storage.engine, scope, "t") == Mark("id:run", 1)
    (again,) = queue.claim(1, now=T0 + timedelta(seconds=3))
    assert again.generation == item.generation + 1


def test_a_version_conflict_leaves_the_row_leased_and_the_call_unwritten(storage):
    scope = _scope()
    queue = _queue(storage, "w1")
    item = _claimed(queue, scope)
    stale = storage.load(**scope.arguments())
    other = storage.load(**scope.arguments())
    other.facts = [Fact(content="Likes coffee")]
    storage.save(other, **scope.arguments())  # another writer, meanwhile
    done: list[str] = []
    with pytest.raises(VersionConflictError):
        _save(
            storage,
            scope,
            queue,
            item,
            Mark("id:m", 1),
            ["Likes tea"],
            expected=stale.version,
            call=_call(scope),
            saved=done,
        )
    assert done == []
    assert _queued(storage, scope) == [(item.generation, "w1")]
    assert watermarks.load(storage.engine, scope, "t") is None
    assert _calls(storage, scope) == []
    assert [f.content for f in storage.load(**scope.arguments()).facts] == ["Likes coffee"]


def test_the_claim_reads_the_memorys_stamp_and_the_runs_load_reads_nothing(storage):
    known, new = _scope(), _scope()
    doc = storage.load(**known.arguments())
    doc.facts = [Fact(content="Likes coffee")]
    storage.save(doc, **known.arguments())
    queue = _queue(storage, "w1")
    for scope in (known, new):
        queue.add(scope, "t", CHAT, Signals(), now=T0)
    items = {item.scope: item for item in queue.claim(5, now=T0 + timedelta(seconds=1))}
    assert items[new].memory == Seen(None)
    assert items[known].memory is not None and items[known].memory.stamp is not None
    assert items[known].memory.stamp[0] == 1

    loaded, seen = _statements(
        storage.engine,
        lambda: [storage.load_seen(items[s].memory, **s.arguments()) for s in (known, new)],
    )
    assert seen == []  # the cache held version 1; nothing stored for the other
    assert [[f.content for f in d.facts] for d in loaded] == [["Likes coffee"], []]
    assert [d.version for d in loaded] == [1, 0]

    # Another process saves after the claim: the document seen is a moment old, and a save
    # from it is refused as any save from an old version is.
    other = SQLStorage(storage.engine)
    moved = other.load(**known.arguments())
    moved.facts = [*moved.facts, Fact(content="Likes tea")]
    other.save(moved, **known.arguments())
    old = storage.load_seen(items[known].memory, **known.arguments())
    old.facts = [*old.facts, Fact(content="Likes jam")]
    with pytest.raises(VersionConflictError):
        storage.save(old, **known.arguments())
    assert [f.content for f in storage.load(**known.arguments()).facts] == [
        "Likes coffee",
        "Likes tea",
    ]
