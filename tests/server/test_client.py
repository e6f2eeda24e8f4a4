"""``memory_sql.client``: ``MemoryClient`` and ``AsyncMemoryClient`` against a real
``memory-sql serve`` on SQLite and PostgreSQL. Each route answers its typed model; each
error body raises the library's own exception (and the client's, with status and code)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from memory_sql import (
    DuplicateFactError,
    FactNotFoundError,
    InvalidScopeError,
    MemoryDocument,
    StorageError,
    UpdateNotFoundError,
    VersionConflictError,
)
from memory_sql.client import (
    AsyncMemoryClient,
    FactChange,
    Forbidden,
    InvalidRequest,
    MemoryClient,
    NotFound,
    StaleVersion,
    TooLarge,
    Unauthorized,
    Unreachable,
    VersionConflict,
)
from memory_sql.database import create_engine
from server.service_process import ServiceProcess

TURNS = [
    {"role": "user", "content": "I deploy with pnpm, never npm."},
    {"role": "assistant", "content": "Noted: pnpm for every deployment."},
]


@pytest.fixture
def limited(start_service: Callable[..., ServiceProcess]) -> ServiceProcess:
    return start_service(with_worker=False, server_max_messages=4)


def test_the_sync_client_covers_the_routes(
    limited: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key, admin = make_key("acme", "write"), make_key("acme", "admin")
    with MemoryClient(limited.base_url, api_key=key) as memory:
        assert memory.health() == {"status": "ok"}
        assert memory.ready()["status"] == "ready"
        queued = memory.queue_conversation("alice", TURNS, thread_id="t1", agent_name="coder")
        assert (queued.queued, queued.due) == (True, "after the debounce")

        added = memory.add_fact(
            "alice", "Deploys with pnpm", category="preference", agent_name="coder"
        )
        assert isinstance(added, FactChange) and added.version == 1
        assert (added.fact.tenant_id, added.fact.agent_name) == ("acme", "coder")
        page = memory.list_facts("alice", agent_name="*", q="PNPM", min_confidence=0.5)
        assert [f.id for f in page.facts] == [added.fact.id] and page.next_offset is None

        changed = memory.update_fact(
            "alice", added.fact.id, confidence=0.99, agent_name="coder", version=1
        )
        assert (changed.fact.confidence, changed.version) == (0.99, 2)
        with pytest.raises(VersionConflictError) as stale:
            memory.update_fact(
                "alice", added.fact.id, content="Deploys with npm", agent_name="coder", version=1
            )
        assert isinstance(stale.value, StaleVersion)
        assert (stale.value.status, stale.value.expected, stale.value.actual) == (412, 1, 2)
        with pytest.raises(DuplicateFactError) as duplicate:
            memory.add_fact("alice", "DEPLOYS with  pnpm", agent_name="coder")
        assert duplicate.value.status == 409 and duplicate.value.code == "duplicate_fact"
        with pytest.raises(FactNotFoundError):
            memory.delete_fact("alice", "fact_000000000000", agent_name="coder")

        doc = memory.get_memory("alice", agent_name="coder")
        assert isinstance(doc, MemoryDocument) and doc.version == 2
        assert [f.content for f in doc.facts] == ["Deploys with pnpm"]
        replaced = memory.put_memory("alice", doc, agent_name="coder", version=doc.version)
        assert (replaced.changed, replaced.version) == (False, 2)

        events = memory.fact_history("alice", added.fact.id, agent_name="coder")
        assert [e.event for e in events.events] == ["added", "updated"]  # oldest first
        assert [e.version for e in memory.changes("alice", agent_name="coder").events] == [1, 2]
        context = memory.context("alice", agent_name="coder", query="how do I deploy?")
        assert "Deploys with pnpm" in context.context and context.version == 2
        by_messages = memory.context("alice", agent_name="coder", messages=TURNS)
        assert "Deploys with pnpm" in by_messages.context

        exported = memory.export_jsonl()
        assert "Deploys with pnpm" in exported
        imported = memory.import_jsonl(exported)
        assert (imported.memories, imported.changed) == (1, 0)
        assert memory.reports(days=7)["totals"]["facts"] == 1
        status = memory.queue_status(user_id="alice")
        assert [u["thread_id"] for u in status.updates] == ["t1"]

        with pytest.raises(NotFound):
            memory.get_memory("nobody")
        with pytest.raises(InvalidScopeError, match="user_id"):  # before any request
            memory.add_fact("../etc/passwd", "x")
        with pytest.raises(InvalidRequest, match="min_confidence"):
            memory.list_facts("alice", min_confidence=2)
        with pytest.raises(TooLarge, match="server_max_messages"):
            memory.queue_conversation("alice", TURNS * 3, thread_id="t2")
        with pytest.raises(Forbidden, match="cannot admin"):
            memory.forget_user("alice")

    with MemoryClient(limited.base_url, api_key=admin) as operator:
        with pytest.raises(UpdateNotFoundError):
            operator.retry_updates(["other/alice/coder/t1"])
        with pytest.raises(InvalidRequest, match="update key"):
            operator.retry_updates(["nonsense"])
        forgotten = operator.forget_user("alice")
        assert forgotten.deleted["memory_facts"] == 1
    with MemoryClient(limited.base_url, api_key=make_key("acme", "read")) as reader:
        with pytest.raises(NotFound):
            reader.list_facts("alice")
        with pytest.raises(PermissionError):
            reader.add_fact("alice", "x")
    stranger = MemoryClient(limited.base_url, api_key="msk_" + "0" * 16 + "_" + "x" * 43)
    with stranger, pytest.raises(Unauthorized) as refused:
        stranger.list_facts("alice")
    assert refused.value.status == 401


def test_the_async_client_and_tenants(
    limited: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key_a, key_b = make_key("A"), make_key("B")

    async def session() -> None:
        async with AsyncMemoryClient(limited.base_url, api_key=key_a) as a:
            added = await a.add_fact("alice", "Lives in Lyon")
            changed = await a.update_fact(
                "alice", added.fact.id, category="knowledge", version=added.version
            )
            assert changed.version == 2
            with pytest.raises(VersionConflictError):
                await a.delete_fact("alice", added.fact.id, version=1)
            assert "Lives in Lyon" in (await a.context("alice", query="where")).context
            assert (await a.get_memory("alice")).version == 2
        async with AsyncMemoryClient(limited.base_url, api_key=key_b) as b:
            with pytest.raises(NotFound):
                await b.list_facts("alice")
            with pytest.raises(FactNotFoundError):
                await b.update_fact("alice", added.fact.id, confidence=0.1)
            assert (await b.context("alice")).context == ""

    asyncio.run(session())


# A writer that always wins carol's memory row: the service's save, ``UPDATE memory_scopes
# SET version = version + 1 WHERE … AND version = :expected``, finds no row to move, as when
# another save moved the version first. Made in the real database by its owner.
OUTRACED = {
    "sqlite": [
        "CREATE TRIGGER outraced BEFORE UPDATE OF version ON memory_scopes"
        " WHEN OLD.user_id = 'carol' BEGIN SELECT RAISE(IGNORE); END"
    ],
    "postgresql": [
        "CREATE FUNCTION outraced() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER outraced BEFORE UPDATE OF version ON memory_scopes FOR EACH ROW"
        " WHEN (OLD.user_id = 'carol') EXECUTE FUNCTION outraced()",
    ],
}
OUTRACED_UNDONE = {
    "sqlite": ["DROP TRIGGER outraced"],
    "postgresql": ["DROP TRIGGER outraced ON memory_scopes", "DROP FUNCTION outraced()"],
}


def _execute(url: str, statements: list[str]) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement)
    finally:
        engine.dispose()


def test_a_change_that_keeps_losing_to_other_saves_is_a_409_version_conflict(
    limited: ServiceProcess, make_key: Callable[..., str], database_url: str
) -> None:
    """Without a version the service retries on the newest one; a change that still loses
    answers 409 ``version_conflict`` (a stale version given is 412, :class:`StaleVersion`),
    which the client raises as :class:`VersionConflict`, and nothing is stored."""
    backend = database_url.split(":", 1)[0].split("+", 1)[0]
    with MemoryClient(limited.base_url, api_key=make_key("acme")) as memory:
        added = memory.add_fact("carol", "Drinks oat milk", category="preference")
        before = memory.get_memory("carol")
        _execute(database_url, OUTRACED[backend])
        try:
            with pytest.raises(VersionConflictError) as lost:
                memory.update_fact("carol", added.fact.id, content="Drinks soy milk")
            after = memory.get_memory("carol")
            history = memory.fact_history("carol", added.fact.id)
        finally:
            _execute(database_url, OUTRACED_UNDONE[backend])
        assert type(lost.value) is VersionConflict
        assert (lost.value.status, lost.value.code) == (409, "version_conflict")
        assert lost.value.scope == "carol/-"
        assert lost.value.message.startswith("memory acme/carol/- changed")
        assert after.version == before.version == 1
        assert [(f.id, f.content, f.category) for f in after.facts] == [
            (added.fact.id, "Drinks oat milk", "preference")
        ]
        assert [e.event for e in history.events] == ["added"]

        # The writer gone, the same change goes through: the conflict was the only obstacle.
        changed = memory.update_fact("carol", added.fact.id, content="Drinks soy milk")
        assert (changed.fact.content, changed.version) == ("Drinks soy milk", 2)


def test_no_answer_is_unreachable_and_a_missing_key_is_named(monkeypatch) -> None:
    memory = MemoryClient("http://127.0.0.1:9", api_key="msk_x", timeout=2)
    with memory, pytest.raises(StorageError) as caught:
        memory.health()
    assert isinstance(caught.value, Unreachable)
    assert "cannot reach the memory service at http://127.0.0.1:9" in str(caught.value)
    monkeypatch.delenv("MEMORY_SQL_API_KEY", raising=False)
    with pytest.raises(ValueError, match="MEMORY_SQL_API_KEY"):
        MemoryClient("http://127.0.0.1:9")
