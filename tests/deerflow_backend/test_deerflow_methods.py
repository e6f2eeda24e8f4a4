"""The backend's whole method surface on real SQLite and PostgreSQL, every document checked
against the gateway's response model, and DeerFlow's gateway statuses for its errors."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
import sqlalchemy as sa
from deerflow.agents.memory.manager import MemoryConflictError
from deerflow_gateway import call, check_document

from memory_sql import Fact, VersionConflictError, open_storage

DEERFLOW_DOC = {
    "version": "1.0",
    "lastUpdated": "2026-08-01T10:00:00.000000Z",
    "user": {
        "workContext": {
            "summary": "Backend engineer at Acme.",
            "updatedAt": "2026-08-01T10:00:00Z",
        },
        "personalContext": {"summary": "", "updatedAt": ""},
        "topOfMind": {"summary": "Migrating to PostgreSQL.", "updatedAt": ""},
    },
    "history": {
        "recentMonths": {"summary": "Shipped the billing service.", "updatedAt": ""},
        "earlierContext": {"summary": "", "updatedAt": ""},
        "longTermBackground": {"summary": "", "updatedAt": ""},
    },
    "facts": [
        {
            "id": "fact_manual1",
            "content": "Prefers tabs over spaces",
            "category": "preference",
            "confidence": 0.9,
            "createdAt": "2026-07-01T08:00:00.000000Z",
            "source": "manual",
        },
        {
            "id": "fact_thread1",
            "content": "Deploys with pnpm",
            "category": "correction",
            "confidence": 0.95,
            "createdAt": "",
            "source": {"type": "conversation", "threadId": "thread-42"},
            "sourceError": "suggested npm",
        },
        {
            "id": "fact_merged1",
            "content": "Works on billing",
            "category": "context",
            "confidence": 0.8,
            "createdAt": "2026-07-02T08:00:00Z",
            "source": {"type": "consolidation", "threadId": None},
        },
    ],
}


@pytest.fixture
def manager(make_manager: Any, database: str) -> Any:
    return make_manager({"url": database, "in_process_worker": False, "max_facts": 10})


def test_an_empty_memory_is_deerflows_empty_document(manager: Any, user: str) -> None:
    for operation in ("get_memory", "reload_memory", "export_memory"):
        status, body = call(manager, operation, user_id=user)
        assert status == 200
        assert body.revision == 0 and body.facts == []
        assert body.lastUpdated  # never "": the frontend's date formatter fails on it
    assert manager.get_context(user) == ""


def test_create_update_and_delete_a_fact(manager: Any, user: str) -> None:
    status, body = call(manager, "create_fact", content="Prefers Python", user_id=user)
    assert status == 200
    (fact,) = body.facts
    assert (fact.category, fact.confidence, fact.source) == ("context", 0.5, "manual")
    document, fact_id = manager.create_fact(
        "Uses PostgreSQL 16", category="Knowledge", confidence=0.9, user_id=user
    )
    check_document(document)
    assert fact_id is not None and fact_id in [f["id"] for f in document["facts"]]
    assert document["revision"] == 2

    status, body = call(manager, "update_fact", fact_id=fact_id, confidence=0.95, user_id=user)
    assert status == 200
    updated = next(f for f in body.facts if f.id == fact_id)
    # omitted fields kept; the category is stored lower-cased
    assert (updated.content, updated.category, updated.confidence) == (
        "Uses PostgreSQL 16",
        "knowledge",
        0.95,
    )
    document = manager.update_fact(fact_id, content="Uses PostgreSQL 17", user_id=user)
    assert next(f for f in document["facts"] if f["id"] == fact_id)["content"] == (
        "Uses PostgreSQL 17"
    )

    status, body = call(manager, "delete_fact", fact_id, user_id=user)
    assert status == 200 and [f.id for f in body.facts] == [fact.id]
    assert call(manager, "delete_fact", fact_id, user_id=user)[0] == 404
    assert call(manager, "update_fact", fact_id=fact_id, content="x", user_id=user)[0] == 404
    with pytest.raises(KeyError):
        manager.delete_fact("fact_nope", user_id=user)


def test_a_casefold_duplicate_is_409_and_a_bad_confidence_400(manager: Any, user: str) -> None:
    manager.create_fact("Lives in Straße 5", user_id=user)
    with pytest.raises(ValueError) as caught:
        manager.create_fact("LIVES IN STRASSE 5", user_id=user)
    assert caught.value.args == ("Duplicate fact",)
    assert call(manager, "create_fact", content="lives  in strasse 5", user_id=user)[0] == 409
    _, other = manager.create_fact("Likes tea", user_id=user)
    with pytest.raises(ValueError, match="^Duplicate fact$"):
        manager.update_fact(other, content="Lives in STRASSE 5", user_id=user)
    for confidence in (1.5, -0.1, True, math.nan, "high"):
        with pytest.raises(ValueError) as caught:
            manager.create_fact("Something new", confidence=confidence, user_id=user)
        assert caught.value.args == ("confidence",)
        assert call(manager, "create_fact", content="x", confidence=confidence, user_id=user)[
            0
        ] == (400)
        with pytest.raises(ValueError, match="^confidence$"):
            manager.update_fact(other, confidence=confidence, user_id=user)
    assert call(manager, "create_fact", content="   ", user_id=user)[0] == 400
    assert call(manager, "create_fact", content="x", category="not a label!", user_id=user)[0] == (
        400
    )
    assert len(manager.get_memory(user_id=user)["facts"]) == 2  # nothing else was stored


def test_a_fact_the_cap_evicts_at_once_gets_no_id(manager: Any, user: str) -> None:
    for number in range(10):
        manager.create_fact(f"Strong fact {number}", confidence=0.9, user_id=user)
    before = manager.get_memory(user_id=user)
    document, fact_id = manager.create_fact("A weak guess", confidence=0.1, user_id=user)
    assert fact_id is None
    assert document["revision"] == before["revision"]  # nothing stored
    assert call(manager, "create_fact", content="Weak again", confidence=0.2, user_id=user)[0] == (
        409
    )
    # A stronger fact takes the place of the weakest.
    document, fact_id = manager.create_fact("A certain fact", confidence=1.0, user_id=user)
    assert fact_id is not None and len(document["facts"]) == 10


def test_import_keeps_ids_times_and_source_types_and_is_idempotent(manager: Any, user: str) -> None:
    status, body = call(manager, "import_memory", DEERFLOW_DOC, user_id=user)
    assert status == 200
    facts = {f.id: f for f in body.facts}
    assert facts["fact_manual1"].source == "manual"
    assert facts["fact_thread1"].source == "thread-42"
    assert facts["fact_thread1"].sourceError == "suggested npm"
    assert facts["fact_merged1"].source == "consolidation"
    assert facts["fact_manual1"].createdAt == "2026-07-01T08:00:00.000000Z"
    assert facts["fact_thread1"].createdAt  # "" read as missing: stamped now
    assert body.user.workContext.summary == "Backend engineer at Acme."
    again = manager.import_memory(DEERFLOW_DOC, user_id=user)
    assert again["revision"] == body.revision  # nothing changed
    assert manager.export_memory(user_id=user) == again
    # Exported and imported elsewhere, the sources survive.
    moved = manager.import_memory(again, user_id=user, agent_name="coder")
    assert {f["id"]: f["source"] for f in moved["facts"]} == {
        "fact_manual1": "manual",
        "fact_thread1": "thread-42",
        "fact_merged1": "consolidation",
    }
    assert call(manager, "import_memory", {"facts": [{"content": ""}]}, user_id=user)[0] == 400
    assert call(manager, "import_memory", {"facts": "no"}, user_id=user)[0] == 400


def test_search_ranks_by_relevance_and_filters_category_before_top_k(
    manager: Any, user: str
) -> None:
    for content, category, confidence in [
        ("Python", "preference", 0.6),
        ("Writes Python scripts for data work", "context", 0.99),
        ("Prefers Python over Go", "preference", 0.7),
        ("Python and Rust", "preference", 0.95),
        ("Lives near the Straße", "context", 0.9),
        ("Rust for systems, python for glue", "preference", 0.8),
        ("Drinks green tea", "preference", 1.0),
    ]:
        manager.create_fact(content, category=category, confidence=confidence, user_id=user)
    found = [f["content"] for f in manager.search("PYTHON", top_k=3, user_id=user)]
    assert len(found) == 3 and found[0] == "Python"  # the shortest match of the term
    assert all("python" in content.lower() for content in found)
    # the facts holding both words before those holding one; the tea never
    both = {"Python and Rust", "Rust for systems, python for glue"}
    ranked = [f["content"] for f in manager.search("rust python", user_id=user)]
    assert set(ranked[:2]) == both and len(ranked) == 5
    # query syntax is only words: "AND" is a function word, left out
    assert {f["content"] for f in manager.search("python AND rust", 2, user_id=user)} == both
    only = manager.search("python", top_k=2, user_id=user, category="context")
    assert [f["content"] for f in only] == ["Writes Python scripts for data work"]
    assert [f["content"] for f in manager.search("strasse", user_id=user)] == [
        "Lives near the Straße"
    ]
    assert manager.search("   ", user_id=user) == [] and manager.search("x", 0, user_id=user) == []
    assert manager.search("python", user_id=user, agent_name="other") == []
    for fact in manager.search("python", user_id=user):
        check_document({"lastUpdated": "2026-01-01T00:00:00Z", "facts": [fact]})
    assert asyncio.run(manager.asearch("python", 1, user_id=user))[0]["content"] == "Python"


def test_agents_are_memories_of_their_own_and_default_is_none(manager: Any, user: str) -> None:
    manager.create_fact("Default fact", user_id=user)
    manager.create_fact("Coder fact", user_id=user, agent_name="Coder")
    assert [f["content"] for f in manager.get_memory(user_id=user)["facts"]] == ["Default fact"]
    assert [
        f["content"] for f in manager.get_memory(user_id=user, agent_name="__default__")["facts"]
    ] == ["Default fact"]
    assert [
        f["content"] for f in manager.get_memory(user_id=user, agent_name="coder")["facts"]
    ] == ["Coder fact"]
    assert call(manager, "get_memory", user_id=user, agent_name="bad name!")[0] == 400


def test_clearing_an_agent_keeps_its_summaries_and_clearing_none_forgets_the_user(
    manager: Any, user: str, database: str
) -> None:
    manager.import_memory(DEERFLOW_DOC, user_id=user)
    manager.import_memory(DEERFLOW_DOC, user_id=user, agent_name="coder")
    manager.add(
        "t-1",
        [{"type": "human", "content": "I use vim"}, {"type": "ai", "content": "Noted."}],
        agent_name="coder",
        user_id=user,
    )
    assert manager.status()["pending"] >= 1
    status, body = call(manager, "clear_memory", user_id=user, agent_name="coder")
    assert status == 200 and body.facts == []
    assert body.user.workContext.summary == "Backend engineer at Acme."  # summaries kept
    assert _pending(database, user, "coder") == 0  # its waiting update went too
    assert len(manager.get_memory(user_id=user)["facts"]) == 3  # other agents untouched

    manager.import_memory(DEERFLOW_DOC, user_id=user, agent_name="coder")
    status, body = call(manager, "clear_memory", user_id=user)
    assert status == 200 and body.revision == 0 and body.facts == []
    assert body.user.workContext.summary == ""
    assert manager.get_memory(user_id=user, agent_name="coder")["facts"] == []


def test_delete_memory(manager: Any, user: str) -> None:
    manager.import_memory(DEERFLOW_DOC, user_id=user)
    manager.import_memory(DEERFLOW_DOC, user_id=user, agent_name="coder")
    assert manager.delete_memory(user_id=user, agent_name="coder") is None
    gone = manager.get_memory(user_id=user, agent_name="coder")
    assert gone["facts"] == [] and gone["user"]["workContext"]["summary"] == ""
    assert len(manager.get_memory(user_id=user)["facts"]) == 3
    manager.delete_memory(user_id=user)
    assert manager.get_memory(user_id=user)["revision"] == 0


def test_get_context_is_the_memory_within_the_budget(make_manager: Any, database: str) -> None:
    manager = make_manager(
        {
            "url": database,
            "in_process_worker": False,
            "max_injection_tokens": 120,
            "guaranteed_token_budget": 40,
            "tenant_id": "ctx",
        }
    )
    user = "budget-user"
    manager.clear_memory(user_id=user)
    manager.import_memory(DEERFLOW_DOC, user_id=user)
    for number in range(30):
        manager.create_fact(f"Filler fact {number} about things", confidence=0.7, user_id=user)
    text = manager.get_context(user)
    assert text.startswith("User Context:") and "Facts:" in text
    assert "Deploys with pnpm (avoid: suggested npm)" in text  # a correction comes first
    assert "<memory>" not in text and "<user_memory>" not in text  # DeerFlow wraps it
    from memory_sql.tokens import make_token_counter

    assert make_token_counter().count(text) <= 120 + 40
    assert asyncio.run(manager.aget_context(user)) == text
    assert manager.get_context("bad user!") == ""  # logged, never raised


def test_version_conflicts_are_retried_then_surface_as_memory_conflict_error(
    manager: Any, user: str, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = manager._storage
    real_save = storage.save
    rival = open_storage(database)
    races = {"left": 0}

    def racing_save(doc: Any, **kwargs: Any) -> int:
        # Another writer saves the same memory between this load and this save.
        if races["left"]:
            races["left"] -= 1
            theirs = rival.load(user_id=user, tenant_id="default")
            theirs.facts.append(Fact(content=f"rival fact {races['left']}"))
            rival.save(theirs, user_id=user, tenant_id="default")
        return real_save(doc, **kwargs)

    monkeypatch.setattr(storage, "save", racing_save)
    try:
        races["left"] = 2  # lost twice, then saved
        document, fact_id = manager.create_fact("Survives two races", user_id=user)
        assert fact_id in [f["id"] for f in document["facts"]]
        assert len(document["facts"]) == 3

        races["left"] = 100  # always loses
        with pytest.raises(MemoryConflictError) as caught:
            manager.create_fact("Never saved", user_id=user)
        assert isinstance(caught.value.__cause__, VersionConflictError)
        races["left"] = 100
        assert call(manager, "update_fact", fact_id=fact_id, content="y", user_id=user)[0] == 409
        races["left"] = 100
        assert call(manager, "import_memory", DEERFLOW_DOC, user_id=user)[0] == 409
    finally:
        rival.close()


def test_a_duplicate_saved_by_a_rival_is_found_on_the_retry(
    manager: Any, user: str, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = manager._storage
    real_save = storage.save
    rival = open_storage(database)
    raced = []

    def racing_save(doc: Any, **kwargs: Any) -> int:
        if not raced:
            raced.append(True)
            theirs = rival.load(user_id=user)
            theirs.facts.append(Fact(content="Races for the same fact"))
            rival.save(theirs, user_id=user)
        return real_save(doc, **kwargs)

    monkeypatch.setattr(storage, "save", racing_save)
    try:
        assert call(manager, "create_fact", content="RACES for the same fact", user_id=user)[0] == (
            409
        )
    finally:
        rival.close()
    assert [f["content"] for f in manager.get_memory(user_id=user)["facts"]] == [
        "Races for the same fact"
    ]


def test_unsupported_hooks_are_the_contracts_defaults(manager: Any) -> None:
    assert manager.on_pre_compress([]) == ""
    assert manager.on_turn_start(1, "hello") is None
    assert manager.warm() is True


def _pending(database: str, user: str, agent: str) -> int:
    engine = sa.create_engine(database)
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.text(
                    "SELECT count(*) FROM memory_pending_updates "
                    "WHERE user_id = :u AND agent_name = :a"
                ),
                {"u": user, "a": agent},
            ).scalar_one()
    finally:
        engine.dispose()


def test_tool_mode_keeps_the_facts_behind_search(make_manager: Any, database: str) -> None:
    manager = make_manager(
        {"url": database, "in_process_worker": False, "tenant_id": "tool"}, mode="tool"
    )
    user = "tool-user"
    manager.clear_memory(user_id=user)
    manager.import_memory(DEERFLOW_DOC, user_id=user)
    manager.create_fact("Allergic to peanuts", confidence=0.8, user_id=user)
    text = manager.get_context(user)
    assert text.startswith("User Context:") and "Facts:" not in text and "peanuts" not in text
    found = manager.search("peanut allergy", user_id=user)
    assert [f["content"] for f in found] == ["Allergic to peanuts"]
