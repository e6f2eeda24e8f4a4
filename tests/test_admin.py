"""memory_sql.ops and the reporting views as a library, on real SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from memory_sql import Fact, ImportFileError, StorageError, migrations, open_storage, ops
from memory_sql.database import create_engine
from memory_sql.ops import (
    export_jsonl,
    forget_user,
    import_jsonl,
    import_memory,
    read_jsonl,
    search_facts,
)
from memory_sql.storage import driver as storage_driver

VIEWS = {
    "memory_report_categories",
    "memory_report_confidence",
    "memory_report_activity",
    "memory_report_largest",
    "memory_report_queue",
    "memory_report_llm_usage",
    "memory_report_llm_rejections",
    "memory_report_superseded",  # revision 0015
    "memory_report_redactions",  # revision 0016
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def storage(request: pytest.FixtureRequest):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    with open_storage(url) as store:
        yield store


def test_the_views_come_with_revision_0004_and_go_with_it(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'views.db'}")
    try:
        migrations.upgrade(engine, "0003")
        assert set(sa.inspect(engine).get_view_names()) == set()
        migrations.upgrade(engine)
        assert set(sa.inspect(engine).get_view_names()) == VIEWS
        with engine.connect() as conn:
            for view in VIEWS:  # each one runs on an empty database
                assert conn.execute(sa.text(f"SELECT * FROM {view}")).all() == []
        assert migrations.check(engine) is None
        migrations.downgrade(engine, "0003")
        assert set(sa.inspect(engine).get_view_names()) == set()
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_views_on_postgresql(new_pg_database):
    engine = create_engine(new_pg_database())
    try:
        migrations.upgrade(engine)
        assert set(sa.inspect(engine).get_view_names()) == VIEWS
        assert migrations.check(engine) is None
        migrations.downgrade(engine, "0003")
        assert set(sa.inspect(engine).get_view_names()) == set()
    finally:
        engine.dispose()


def test_search_folds_case_and_unicode_like_duplicate_detection(storage):
    user = f"u-{uuid.uuid4().hex[:8]}"
    doc = storage.load(user_id=user)
    doc.facts = [
        Fact(content="Wohnt in der Hauptstraße", confidence=0.9),
        Fact(content="Codes in ＰＹＴＨＯＮ", confidence=0.8),  # full-width: NFKC → PYTHON
        Fact(content="在 上海 工作", confidence=0.7),
        Fact(content="ΣΊΣΥΦΟΣ fan", confidence=0.6),
    ]
    storage.save(doc, user_id=user)

    def found(text: str, **filters: object) -> list[str]:
        return [r.fact.content for r in search_facts(storage.engine, text, user_id=user, **filters)]

    assert found("HAUPTSTRASSE") == ["Wohnt in der Hauptstraße"]
    assert found("python") == ["Codes in ＰＹＴＨＯＮ"]
    assert found("上海   工作") == ["在 上海 工作"]  # whitespace folded
    assert found("σίσυφος") == ["ΣΊΣΥΦΟΣ fan"]  # final sigma folds too
    assert found("haupt pyth") == []  # every term must match
    assert found("haupt") == found("wohnt HAUPTSTR") == ["Wohnt in der Hauptstraße"]  # prefixes
    assert sorted(found("in", limit=2)) == ["Codes in ＰＹＴＨＯＮ", "Wohnt in der Hauptstraße"]
    assert found("in", limit=1) in (["Codes in ＰＹＴＨＯＮ"], ["Wohnt in der Hauptstraße"])
    assert found("!!! ***") == [] and found('" OR "1') == []  # no terms: nothing matches
    assert found("", min_confidence=0.75) == ["Wohnt in der Hauptstraße", "Codes in ＰＹＴＨＯＮ"]
    assert found("python", agent_name="") == ["Codes in ＰＹＴＨＯＮ"]
    assert found("python", agent_name="coder") == []
    with pytest.raises(ValueError, match="limit"):
        search_facts(storage.engine, limit=0)


def _search_everything(storage, user: str) -> list[list]:
    return [
        search_facts(storage.engine, user_id=user, **{"limit": None, **filters})
        for filters in (
            {},
            {"category": "goal"},
            {"category": " Goal ", "tenant_id": "default"},
            {"min_confidence": 0.5},
            {"agent_name": ""},
            {"agent_name": "coder", "category": "goal"},
            {"limit": 2},
            {"limit": 1, "min_confidence": 0.6, "agent_name": "coder"},
        )
    ]


def test_search_by_the_driver_gives_what_sqlalchemy_gives(storage, monkeypatch):
    user = f"u-{uuid.uuid4().hex[:8]}"
    for agent, offset in ((None, 0.0), ("coder", 0.05)):
        doc = storage.load(user_id=user, agent_name=agent)
        doc.facts = [
            Fact(
                content=f"fact {i} of {agent}",
                category=("goal", "context", "preference")[i % 3],
                confidence=round(0.3 + 0.1 * i + offset, 2),
                source_thread_id=f"thread-{i}" if i % 2 else None,
                source_error="said wrongly" if i == 4 else None,
            )
            for i in range(7)
        ]
        storage.save(doc, user_id=user, agent_name=agent)
    everything = ops.search._search_statement(frozenset({"user"}))
    assert storage_driver.read_facts_by_driver(storage.engine, everything, {"user": user}, 3)
    driver = _search_everything(storage, user)
    assert [len(found) for found in driver] == [14, 6, 6, 10, 7, 3, 2, 1]
    assert {r.agent_name for r in driver[0]} == {None, "coder"}
    for record in driver[0]:
        assert record.fact.created_at.tzinfo is dt.timezone.utc
        assert record.fact.updated_at.tzinfo is dt.timezone.utc
    seen: list[str] = []

    def listen(_conn, _cursor, statement, *_args) -> None:
        seen.append(statement)

    event.listen(storage.engine, "before_cursor_execute", listen)
    try:  # someone listens to SQLAlchemy's statements: they go through SQLAlchemy
        assert _search_everything(storage, user) == driver
    finally:
        event.remove(storage.engine, "before_cursor_execute", listen)
    assert len([s for s in seen if "memory_facts" in s]) == len(driver)
    # the driver failing on the statement: SQLAlchemy reads instead
    monkeypatch.setattr(
        storage_driver, "compiled_for_driver", lambda *_: ("SELECT no_such_column", {})
    )
    assert _search_everything(storage, user) == driver


def test_search_on_a_database_that_refuses_connections_raises_storage_error():
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:9/nothing_here")
    try:
        with pytest.raises(StorageError, match=r"search facts: database .*127\.0\.0\.1:9"):
            search_facts(engine, category="goal", user_id="u1")
    finally:
        engine.dispose()


def test_an_import_without_section_timestamps_is_idempotent(storage):
    user = f"u-{uuid.uuid4().hex[:8]}"
    memory = {"user": {"workContext": {"summary": "Engineer"}}, "facts": [{"content": "Tea"}]}
    assert import_memory(storage, json.dumps(memory), user_id=user) == (0, 1)
    assert import_memory(storage, memory, user_id=user) == (1, 1)
    stored = storage.load(user_id=user)
    assert stored.user.work_context.summary == "Engineer"
    assert stored.user.work_context.updated_at is not None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"user_id": "u", "memory": {}, "agent": "x"}', "unknown key 'agent'"),
        ('{"user_id": "u"}', "missing 'memory'"),
        ('{"memory": {}}', "missing 'user_id'"),
        ("[1, 2]", "expected a JSON object, not an array"),
        ('{"user_id": "u", "agent_name": "no spaces", "memory": {}}', "invalid agent_name"),
        ('{"user_id": "u", "memory": []}', "a memory must be a JSON object"),
        ('{"user_id": "u", "memory": {"facts": [{"id": "a", "content": "x"}, '
         '{"id": "a", "content": "y"}]}}', "fact id 'a' appears twice"),
        ('{"user_id": "u", "memory": {"facts": [{"content": "Straße"}, '
         '{"content": "STRASSE"}]}}', "duplicates another"),
        ('{"user_id": "first", "memory": {}}', "already on line 1"),
    ],
)  # fmt: skip
def test_read_jsonl_names_the_bad_line(line, problem):
    content = '{"user_id": "first", "memory": {}}\n\n' + line + "\n"
    with pytest.raises(ImportFileError, match="line 3") as caught:
        read_jsonl(content, source="x.jsonl")
    assert problem in str(caught.value) and caught.value.line == 3


def test_read_jsonl_refuses_bytes_that_are_not_utf8():
    with pytest.raises(ImportFileError, match="line 2: not UTF-8"):
        read_jsonl(b'{"user_id": "a", "memory": {}}\n\xff\xfe\n')


def test_export_import_and_forget_by_tenant(storage):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    for user in ("a", "b"):
        doc = storage.load(user_id=user, tenant_id=tenant)
        doc.facts = [Fact(content=f"{user} likes tea")]
        storage.save(doc, user_id=user, tenant_id=tenant)
    out = io.StringIO()
    assert export_jsonl(storage.engine, out, tenant_id=tenant) == 2
    assert forget_user(storage.engine, "a", tenant_id=tenant)["memory_facts"] == 1
    result = import_jsonl(storage.engine, out.getvalue())
    assert (result.memories, result.changed, result.unchanged) == (2, 1, 1)
    assert [f.content for f in storage.load(user_id="a", tenant_id=tenant).facts] == ["a likes tea"]
