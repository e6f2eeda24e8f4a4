"""The storage contract, run against every backend (sqlite, postgresql, files)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memory_sql import (
    DuplicateFactError,
    Fact,
    InvalidScopeError,
    MemoryDocument,
    VersionConflictError,
)
from memory_sql.storage import MemoryStorage, open_storage


def _fact(content: str, **fields: object) -> Fact:
    return Fact(content=content, **fields)


def _facts_by_content(doc: MemoryDocument) -> dict[str, Fact]:
    return {fact.content: fact for fact in doc.facts}


def test_nothing_stored_loads_an_empty_document_at_version_0(storage, scope):
    doc = storage.load(**scope)
    assert doc.version == 0
    assert doc.is_empty()
    assert doc.facts == []


def test_round_trip_keeps_every_field(storage, scope):
    doc = storage.load(**scope)
    created = datetime(2026, 4, 23, 6, 28, 4, 480073, tzinfo=timezone.utc)
    doc.user.work_context.summary = "Data engineer at a logistics company."
    doc.user.personal_context.summary = "Lives in Berlin; cycles to work."
    doc.history.long_term_background.summary = "Ten years of Python."
    doc.facts = [
        _fact(
            "Prefers tabs over spaces",
            category="preference",
            confidence=0.93,
            source_thread_id="thread-1",
            created_at=created,
        ),
        _fact(
            "Uses PostgreSQL 16, not MySQL",
            category="correction",
            confidence=0.97,
            source_error="assumed MySQL",
            created_at=created + timedelta(seconds=1),
        ),
    ]
    assert storage.save(doc, **scope, expected_version=0) == 1

    loaded = storage.load(**scope)
    assert loaded.version == 1
    assert loaded.user.work_context.summary == "Data engineer at a logistics company."
    assert loaded.user.personal_context.summary == "Lives in Berlin; cycles to work."
    assert loaded.history.long_term_background.summary == "Ten years of Python."
    assert loaded.user.top_of_mind.summary == ""
    assert loaded.user.work_context.updated_at is not None
    assert [f.id for f in loaded.facts] == [f.id for f in doc.facts]
    first, second = loaded.facts
    assert (first.content, first.category, first.confidence) == (
        "Prefers tabs over spaces",
        "preference",
        0.93,
    )
    assert first.source_thread_id == "thread-1"
    assert first.created_at == created
    assert first.updated_at is not None and first.updated_at >= created
    assert second.source_error == "assumed MySQL"
    assert loaded.last_updated is not None


def test_a_new_storage_object_reads_what_another_wrote(storage, target, scope):
    doc = storage.load(**scope)
    doc.facts.append(_fact("Writes Rust on weekends", category="context", confidence=0.8))
    storage.save(doc, **scope)
    with open_storage(target) as other:
        loaded = other.load(**scope)
    assert loaded.version == 1
    assert [f.content for f in loaded.facts] == ["Writes Rust on weekends"]


def test_updates_and_removals_round_trip(storage, scope):
    doc = storage.load(**scope)
    doc.facts = [_fact(f"fact number {i}", confidence=0.5 + i / 100) for i in range(5)]
    storage.save(doc, **scope)
    doc = storage.load(**scope)
    removed = doc.facts.pop(0)
    doc.facts[0] = doc.facts[0].replace(confidence=0.99)
    doc.facts[1] = doc.facts[1].replace(content="fact number two, reworded")
    doc.user.top_of_mind.summary = "Shipping v2."
    assert storage.save(doc, **scope) == 2
    loaded = storage.load(**scope)
    contents = _facts_by_content(loaded)
    assert removed.content not in contents
    assert contents["fact number 1"].confidence == 0.99
    assert "fact number two, reworded" in contents
    assert len(loaded.facts) == 4
    assert loaded.user.top_of_mind.summary == "Shipping v2."


def test_stale_save_raises_conflict_and_keeps_the_winner(storage, scope):
    first = storage.load(**scope)
    second = storage.load(**scope)
    first.facts.append(_fact("Likes green tea"))
    second.facts.append(_fact("Likes black coffee"))
    assert storage.save(first, **scope) == 1
    with pytest.raises(VersionConflictError) as caught:
        storage.save(second, **scope)
    assert caught.value.expected == 0 and caught.value.actual == 1
    assert "expected version 0" in str(caught.value)
    loaded = storage.load(**scope)
    assert [f.content for f in loaded.facts] == ["Likes green tea"]
    assert loaded.version == 1


def test_a_stale_save_that_changes_nothing_raises_conflict_too(storage, scope):
    """An unchanged document writes nothing only while its version is still the stored one:
    saved after another writer moved on (or, at version 0, onto a memory made since), it is
    refused as any stale save is, however fast the backend's path for an unchanged save."""
    doc = storage.load(**scope)
    doc.facts.append(_fact("Likes green tea"))
    storage.save(doc, **scope)
    stale, winner = storage.load(**scope), storage.load(**scope)
    winner.facts.append(_fact("Likes black coffee"))
    assert storage.save(winner, **scope) == 2
    with pytest.raises(VersionConflictError) as caught:
        storage.save(stale, **scope)  # as loaded: nothing changed in it
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    with pytest.raises(VersionConflictError):
        storage.save(MemoryDocument(), **scope)  # version 0: "nothing stored yet"
    assert [f.content for f in storage.load(**scope).facts] == [
        "Likes green tea",
        "Likes black coffee",
    ]


def test_conflict_when_expected_version_is_ahead(storage, scope):
    doc = storage.load(**scope)
    doc.facts.append(_fact("Something"))
    with pytest.raises(VersionConflictError):
        storage.save(doc, **scope, expected_version=3)
    assert storage.load(**scope).version == 0


def test_unchanged_document_keeps_its_version(storage, scope):
    doc = storage.load(**scope)
    doc.facts.append(_fact("Reads Hacker News"))
    assert storage.save(doc, **scope) == 1
    again = storage.load(**scope)
    assert storage.save(again, **scope) == 1
    assert storage.load(**scope).version == 1


def test_save_does_not_modify_the_callers_document(storage, scope):
    doc = storage.load(**scope)
    doc.facts.append(_fact("Has a cat"))
    before = doc.model_dump()
    storage.save(doc, **scope)
    assert doc.model_dump() == before


def test_loaded_documents_share_nothing_with_the_cache(storage, scope):
    doc = storage.load(**scope)
    doc.facts.append(_fact("Runs marathons"))
    storage.save(doc, **scope)
    first = storage.load(**scope)
    first.facts[0] = first.facts[0].replace(content="changed in memory only")
    first.facts.append(Fact(content="appended in memory only"))
    first.user.work_context.summary = "changed too"
    second = storage.load(**scope)
    assert [f.content for f in second.facts] == ["Runs marathons"]
    assert second.user.work_context.summary == ""


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Straße", "STRASSE"),
        ("Prefers Python", "PREFERS PYTHON"),
        ("Prefers   Python", "prefers python"),
        ("ｆｕｌｌｗｉｄｔｈ", "FULLWIDTH"),
    ],
)
def test_casefold_duplicates_are_refused(storage, scope, first, second):
    doc = storage.load(**scope)
    doc.facts = [_fact(first)]
    storage.save(doc, **scope)
    doc = storage.load(**scope)
    doc.facts.append(_fact(second))
    doc.user.work_context.summary = "this must not be stored either"
    with pytest.raises(DuplicateFactError) as caught:
        storage.save(doc, **scope)
    assert isinstance(caught.value, ValueError)
    loaded = storage.load(**scope)
    assert [f.content for f in loaded.facts] == [first]
    assert loaded.user.work_context.summary == ""
    assert loaded.version == 1


def test_a_fact_may_take_the_text_of_one_removed_in_the_same_save(storage, scope):
    doc = storage.load(**scope)
    doc.facts = [_fact("Uses vim")]
    storage.save(doc, **scope)
    doc = storage.load(**scope)
    doc.facts = [_fact("USES VIM", category="preference", confidence=0.9)]
    assert storage.save(doc, **scope) == 2
    loaded = storage.load(**scope)
    assert [(f.content, f.category) for f in loaded.facts] == [("USES VIM", "preference")]


def test_facts_may_trade_contents_in_one_save(storage, scope):
    doc = storage.load(**scope)
    doc.facts = [_fact("likes tea", id="a"), _fact("likes coffee", id="b"), _fact("x", id="c")]
    storage.save(doc, **scope)
    doc = storage.load(**scope)
    swapped = {"a": "likes coffee", "b": "likes tea", "c": "x"}
    doc.facts = [f.replace(content=swapped[f.id]) for f in doc.facts]
    assert storage.save(doc, **scope) == 2
    doc = storage.load(**scope)
    assert {f.id: f.content for f in doc.facts} == swapped
    chained = {"a": "likes TEA", "b": "likes water", "c": "LIKES COFFEE"}
    doc.facts = [f.replace(content=chained[f.id]) for f in doc.facts]
    assert storage.save(doc, **scope) == 3
    assert {f.id: f.content for f in storage.load(**scope).facts} == chained


def test_two_facts_with_one_id_are_refused(storage, scope):
    doc = storage.load(**scope)
    doc.facts = [_fact("one", id="same"), _fact("two", id="same")]
    with pytest.raises(ValueError, match="'same' appears twice"):
        storage.save(doc, **scope)
    assert storage.load(**scope).version == 0


def _stored_once(doc: MemoryDocument) -> MemoryDocument:
    doc.facts[5] = doc.facts[7]  # the very object, at two places
    return doc


@pytest.mark.parametrize(
    "repeat",
    [
        pytest.param(lambda doc: doc.facts.append(doc.facts[3]), id="a stored fact appended"),
        pytest.param(_stored_once, id="a stored fact in another's place"),
        pytest.param(
            lambda doc: doc.facts.append(_fact("reworded", id=doc.facts[0].id)), id="a new twin"
        ),
        pytest.param(
            lambda doc: doc.facts.insert(0, doc.facts[9].replace(content="moved")),
            id="a changed twin in front",
        ),
        pytest.param(
            lambda doc: doc.facts.extend([_fact("new a", id="n"), _fact("new b", id="n")]),
            id="two new twins",
        ),
    ],
)
def test_a_fact_id_given_twice_in_a_stored_memory_is_refused(storage, scope, repeat):
    """However the repeated id comes (the same object twice, a copy with other words, at the
    end or in front), the save is refused naming it, and what is stored stays."""
    storage.save(MemoryDocument(facts=[_fact(f"fact {i}") for i in range(12)]), **scope)
    stored = storage.load(**scope)
    doc = storage.load(**scope)
    repeat(doc)
    (twice,) = {f.id for f in doc.facts if [g.id for g in doc.facts].count(f.id) > 1}
    with pytest.raises(ValueError, match=f"{twice!r} appears twice"):
        storage.save(doc, **scope)
    after = storage.load(**scope)
    assert after.version == stored.version == 1
    assert after.facts == stored.facts


@pytest.mark.parametrize(
    "text",
    [
        "x" * 10_000,
        "用户喜欢简洁的回答，不喜欢废话。" * 300,
        "Loves 🐍 and 🦀 and 👩‍💻 (ZWJ sequence)",
        "quotes ' \" ; -- DROP TABLE memory_facts; /* */",
        "<tag> & </user_memory> \\ backslash \t tab",
        "line one\nline two\r\nline three",
        "combining: e\u0301 vs \u00e9",
    ],
    ids=["10k-ascii", "cjk", "emoji", "sql", "markup", "newlines", "combining"],
)
def test_hostile_and_large_text_round_trips_intact(storage, scope, text):
    doc = storage.load(**scope)
    doc.facts = [_fact(text)]
    doc.user.work_context.summary = text
    storage.save(doc, **scope)
    loaded = storage.load(**scope)
    assert loaded.facts[0].content == text
    assert loaded.user.work_context.summary == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [("nul \x00 byte", "NUL byte"), ("lone \ud800 surrogate", "not valid Unicode")],
)
def test_text_no_backend_can_hold_is_refused_before_storage(text, reason):
    with pytest.raises(ValidationError, match=reason):
        Fact(content=text)
    doc = MemoryDocument()
    with pytest.raises(ValidationError, match=reason):
        doc.user.work_context.summary = text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("agent_name", "../etc"),
        ("agent_name", "has space"),
        ("agent_name", "under_score"),
        ("agent_name", ""),
        ("agent_name", "a" * 65),
        ("agent_name", "名字"),
        ("user_id", "../../etc/passwd"),
        ("user_id", "a/b"),
        ("user_id", "x'; DROP TABLE memory_facts; --"),
        ("user_id", ".hidden"),
        ("user_id", "u" * 129),
        ("user_id", "tab\tuser"),
        ("tenant_id", "acme corp"),
        ("tenant_id", ""),
        ("user_id", 42),
        ("user_id", ["u1"]),  # unhashable: refused as any other non-string
        ("tenant_id", {"acme": 1}),
    ],
)
def test_bad_scope_names_are_refused_naming_the_field(storage, field, value):
    args = {"user_id": "fine-user", "agent_name": "coder", field: value}
    with pytest.raises(InvalidScopeError) as caught:
        storage.load(**args)
    assert isinstance(caught.value, ValueError)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"invalid {field}")
    doc = MemoryDocument(facts=[_fact("never stored")])
    with pytest.raises(InvalidScopeError):
        storage.save(doc, **args)


def test_scopes_are_isolated(storage, scope):
    user = scope["user_id"]
    places = [
        {"user_id": user, "agent_name": "coder"},
        {"user_id": user, "agent_name": "writer"},
        {"user_id": user, "agent_name": None},
        {"user_id": user + "-other", "agent_name": "coder"},
        {"user_id": user, "agent_name": "coder", "tenant_id": "acme"},
    ]
    for i, place in enumerate(places):
        doc = storage.load(**place)
        doc.facts = [_fact(f"fact of place {i}")]
        storage.save(doc, **place)
    for i, place in enumerate(places):
        loaded = storage.load(**place)
        assert [f.content for f in loaded.facts] == [f"fact of place {i}"]
        assert loaded.version == 1


def test_agent_names_are_case_insensitive(storage, scope):
    doc = storage.load(user_id=scope["user_id"], agent_name="Coder")
    doc.facts = [_fact("Shared by Coder and coder")]
    storage.save(doc, user_id=scope["user_id"], agent_name="Coder")
    loaded = storage.load(user_id=scope["user_id"], agent_name="coder")
    assert [f.content for f in loaded.facts] == ["Shared by Coder and coder"]


def test_facts_load_ordered_by_creation_time(storage, scope):
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    doc = storage.load(**scope)
    doc.facts = [
        _fact("third", created_at=base + timedelta(days=2)),
        _fact("first", created_at=base),
        _fact("second", created_at=base + timedelta(days=1)),
    ]
    storage.save(doc, **scope)
    assert [f.content for f in storage.load(**scope).facts] == ["first", "second", "third"]


def test_storage_is_a_context_manager(target, scope):
    with open_storage(target) as store:
        assert isinstance(store, MemoryStorage)
        assert store.load(**scope).version == 0
