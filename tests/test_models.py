"""The memory document: validation, fact identity and DeerFlow's memory.json shape."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from memory_sql import Fact, MemoryDocument, fact_key

DEERFLOW = {
    "version": "1.0",
    "lastUpdated": "2026-04-23T06:28:04.480073Z",
    "user": {
        "workContext": {"summary": "Video creator.", "updatedAt": "2026-04-23T06:28:04.480073Z"},
        "personalContext": {"summary": "", "updatedAt": ""},
        "topOfMind": {"summary": "DeerFlow internals.", "updatedAt": "2026-04-20T00:00:00Z"},
    },
    "history": {
        "recentMonths": {"summary": "Built a MoviePy pipeline.", "updatedAt": ""},
        "earlierContext": {"summary": "", "updatedAt": ""},
        "longTermBackground": {"summary": "", "updatedAt": ""},
    },
    "facts": [
        {
            "id": "fact_ab12cd34",
            "content": "用户偏好简洁沟通",
            "category": "preference",
            "confidence": 0.85,
            "createdAt": "2026-04-01T12:00:00.000000Z",
            "source": "thread_abc123",
        },
        {
            "id": "fact_ef56",
            "content": "Uses PostgreSQL, not MySQL",
            "category": "correction",
            "confidence": 0.95,
            "createdAt": "2026-04-02T12:00:00.000000Z",
            "source": {"type": "conversation", "threadId": "thread_def"},
            "sourceError": "assumed MySQL",
        },
    ],
}


def test_deerflow_json_round_trips():
    doc = MemoryDocument.from_deerflow(DEERFLOW)
    assert doc.version == 0
    assert doc.user.work_context.summary == "Video creator."
    assert doc.user.personal_context.updated_at is None
    assert doc.facts[0].source_thread_id == "thread_abc123"
    assert doc.facts[1].source_thread_id == "thread_def"
    assert doc.facts[1].source_error == "assumed MySQL"
    out = doc.to_deerflow()
    assert out["user"] == DEERFLOW["user"] | {
        "topOfMind": {"summary": "DeerFlow internals.", "updatedAt": "2026-04-20T00:00:00.000000Z"}
    }
    assert out["facts"][0] == DEERFLOW["facts"][0]
    assert out["facts"][1]["source"] == "thread_def"
    assert MemoryDocument.from_deerflow(out) == doc


def test_seed_snake_case_facts_are_accepted():
    doc = MemoryDocument.from_deerflow(
        {
            "facts": [
                {
                    "id": "uuid-1",
                    "content": "用户偏好简洁沟通",
                    "category": "preference",
                    "confidence": 0.85,
                    "source_thread_id": "thread_abc123",
                    "created_at": "2026-06-30T12:00:00Z",
                }
            ]
        }
    )
    fact = doc.facts[0]
    assert fact.source_thread_id == "thread_abc123"
    assert fact.created_at.isoformat() == "2026-06-30T12:00:00+00:00"


def test_deerflow_json_text_is_accepted():
    assert MemoryDocument.from_deerflow(json.dumps(DEERFLOW)).facts[1].category == "correction"


@pytest.mark.parametrize(
    ("source", "thread"),
    [
        ("manual", "manual"),
        ("consolidation", "consolidation"),
        ("import", "import"),
        ("unknown", None),
        ("", None),
        ("t-9", "t-9"),
        ({"type": "import"}, "import"),
        ({"type": "import", "threadId": None}, "import"),
        ({"type": "conversation", "threadId": "t-9"}, "t-9"),
        ({"type": "unknown", "threadId": None}, None),
        ({"threadId": "t-9"}, "t-9"),
    ],
)
def test_deerflow_source_forms(source, thread):
    # A source type is kept where there is no thread, so that it reads back as that type.
    fact = Fact(content="x", source=source)
    assert fact.source_thread_id == thread
    assert MemoryDocument(facts=[fact]).to_deerflow()["facts"][0]["source"] == (thread or "unknown")


@pytest.mark.parametrize("created", ["", None])
def test_an_empty_deerflow_timestamp_reads_as_missing(created):
    before = datetime.now(timezone.utc)
    fact = Fact.model_validate({"content": "x", "createdAt": created})
    assert fact.created_at >= before
    doc = MemoryDocument.from_deerflow(
        {"lastUpdated": "", "facts": [{"content": "x", "createdAt": ""}]}
    )
    assert doc.last_updated is None and doc.facts[0].created_at >= before


@pytest.mark.parametrize(
    ("confidence", "message"),
    [
        (True, "boolean"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (1.01, "between 0 and 1"),
        (-0.1, "between 0 and 1"),
        ("high", "valid number"),
    ],
)
def test_bad_confidence_is_refused(confidence, message):
    with pytest.raises(ValidationError, match=message):
        Fact(content="x", confidence=confidence)


def test_numeric_string_confidence_is_parsed():
    assert Fact(content="x", confidence="0.75").confidence == 0.75


@pytest.mark.parametrize("content", ["", "   ", "\n\t"])
def test_empty_content_is_refused(content):
    with pytest.raises(ValidationError, match="empty"):
        Fact(content=content)


def test_content_is_stripped_and_category_normalised():
    fact = Fact(content="  Likes jazz  ", category=" Preference ")
    assert (fact.content, fact.category) == ("Likes jazz", "preference")
    assert Fact(content="x", category=None).category == "context"
    with pytest.raises(ValidationError, match="category"):
        Fact(content="x", category="no spaces allowed")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("Straße", "STRASSE", True),
        ("Prefers  Python", "prefers python", True),
        ("ﬁle", "FILE", True),
        ("Café", "Cafe\u0301", True),
        ("likes tea", "likes teas", False),
        ("我喜欢茶", "我喜欢 茶", False),
    ],
)
def test_fact_key(a, b, same):
    assert (fact_key(a) == fact_key(b)) is same


def test_duplicate_fact_finds_the_second_of_a_pair():
    doc = MemoryDocument(facts=[Fact(content="A"), Fact(content="b"), Fact(content="a")])
    duplicate = doc.duplicate_fact()
    assert duplicate is not None and duplicate.content == "a"
    assert MemoryDocument(facts=[Fact(content="A")]).duplicate_fact() is None


def test_facts_are_immutable_and_replace_validates():
    fact = Fact(content="x", confidence=0.5)
    with pytest.raises(ValidationError, match="frozen"):
        fact.confidence = 0.9
    changed = fact.replace(confidence=0.9, content="  y ")
    assert (changed.id, changed.content, changed.confidence) == (fact.id, "y", 0.9)
    assert fact.confidence == 0.5
    with pytest.raises(ValidationError, match="between 0 and 1"):
        fact.replace(confidence=2.0)


def test_sections_validate_assignment():
    doc = MemoryDocument()
    with pytest.raises(ValidationError, match="NUL"):
        doc.user.top_of_mind.summary = "a\x00b"


def test_source_thread_ids_fit_the_column():
    assert Fact(content="x", source_thread_id="t" * 256).source_thread_id == "t" * 256
    with pytest.raises(ValidationError, match="more than 256"):
        Fact(content="x", source_thread_id="t" * 257)
