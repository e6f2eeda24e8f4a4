"""Facts that age and are superseded (revision 0015), on SQLite and PostgreSQL: closed rows
instead of deletes, the partial unique index among live facts (raced by real threads), as-of
reads, history texts, purge, forget, search, the DeerFlow round trip, and the staleness review,
confirmations and consolidation inside the regular update through the scripted LLM."""

from __future__ import annotations

import importlib.util
import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from llm_server import LABELS, llm_config, update_reply
from typer.testing import CliRunner

from memory_sql import Fact, MemoryConfig, MemoryDocument, MemoryService, migrations, ops
from memory_sql.cli import app
from memory_sql.database import create_engine
from memory_sql.errors import DuplicateFactError, VersionConflictError
from memory_sql.models import fact_digest
from memory_sql.ops import history
from memory_sql.ops.reports import build_report
from memory_sql.schema import memory_facts, memory_llm_calls
from memory_sql.scope import Scope
from memory_sql.storage import SQLStorage
from memory_sql.text_search import query_terms
from memory_sql.update.updater import MemoryUpdater

NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(days=400)
SCOPE = {"user_id": "u1", "agent_name": "coder", "tenant_id": "acme"}
CONVERSATION = [
    {"role": "user", "content": "I still live in Porto and I like Python."},
    {"role": "assistant", "content": "Noted."},
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        target = f"sqlite:///{tmp_path / 'validity.db'}"
        migrations.upgrade(target)
        return target
    return request.getfixturevalue("own_pg_url")


@pytest.fixture
def store(url: str):
    storage = SQLStorage(url)
    yield storage
    storage.close()


def _save(store: SQLStorage, *facts: Fact) -> MemoryDocument:
    doc = store.load(**SCOPE)
    doc.facts.extend(facts)
    store.save(doc, **SCOPE)
    return store.load(**SCOPE)


def _rows(store: SQLStorage) -> dict[str, tuple]:
    query = sa.select(
        memory_facts.c.fact_id, memory_facts.c.valid_to, memory_facts.c.superseded_by
    ).where(memory_facts.c.tenant_id == "acme")
    with store.engine.connect() as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(query)}


# Supersession in storage -------------------------------------------------------------------


def test_a_removed_fact_is_closed_not_deleted_and_its_text_stays_in_history(store):
    doc = _save(store, Fact(id="fact_lisbon", content="Lives in Lisbon", confidence=0.9))
    before_move = datetime.now(timezone.utc)
    porto = Fact(id="fact_porto", content="Lives in Porto", confidence=0.95)
    doc.facts = [porto]
    doc.superseded["fact_lisbon"] = "fact_porto"
    store.save(doc, **SCOPE)

    live = store.load(**SCOPE)
    assert [f.id for f in live.facts] == ["fact_porto"]
    rows = _rows(store)
    assert rows["fact_porto"] == (None, None)
    assert rows["fact_lisbon"][0] is not None and rows["fact_lisbon"][1] == "fact_porto"

    then = store.load(**SCOPE, as_of=before_move)
    assert [f.content for f in then.facts] == ["Lives in Lisbon"]
    [old] = then.facts
    assert old.valid_to is not None and old.superseded_by == "fact_porto"
    with pytest.raises((VersionConflictError, ValueError)):  # a past view is never saved
        store.save(then, **SCOPE)
    now_view = store.load(**SCOPE, as_of=datetime.now(timezone.utc))
    assert [f.id for f in now_view.facts] == ["fact_porto"]
    with pytest.raises(ValueError, match="time zone"):
        store.load(**SCOPE, as_of=datetime(2026, 1, 1))

    events, _ = history.change_log(store.engine, Scope.of(**SCOPE), fact_id="fact_lisbon")
    added, removed = events  # oldest first
    assert (removed["event"], removed["content_before"], removed["content_after"]) == (
        "removed",
        "Lives in Lisbon",
        None,
    )
    assert removed["superseded_by"] == "fact_porto"
    assert (added["event"], added["content_after"]) == ("added", "Lives in Lisbon")


def test_an_edit_keeps_its_text_before_and_after_and_the_old_version(store):
    doc = _save(store, Fact(id="fact_a", content="Uses vim", confidence=0.8))
    doc.facts = [doc.facts[0].replace(content="Uses neovim")]
    store.save(doc, **SCOPE)
    events, _ = history.change_log(store.engine, Scope.of(**SCOPE), fact_id="fact_a")
    assert (events[-1]["event"], events[-1]["content_before"], events[-1]["content_after"]) == (
        "updated",
        "Uses vim",
        "Uses neovim",
    )
    # The old text stays readable as of its time: a closed version superseded by the fact.
    edited = store.load(**SCOPE).facts[0]
    assert edited.id == "fact_a" and edited.valid_from is not None
    then = store.load(**SCOPE, as_of=edited.valid_from - timedelta(microseconds=1))
    assert [(f.content, f.superseded_by) for f in then.facts] == [("Uses vim", "fact_a")]
    assert [f.content for f in store.load(**SCOPE, as_of=edited.valid_from).facts] == [
        "Uses neovim"
    ]


def test_closed_facts_leave_the_casefold_key_free_but_live_duplicates_are_refused(store):
    doc = _save(store, Fact(id="fact_one", content="Prefers tea", confidence=0.9))
    doc.facts = []
    store.save(doc, **SCOPE)
    doc = _save(store, Fact(id="fact_two", content="PREFERS  TEA", confidence=0.9))
    assert [f.id for f in doc.facts] == ["fact_two"]
    assert set(_rows(store)) == {"fact_one", "fact_two"}
    doc.facts.append(Fact(id="fact_three", content="prefers tea", confidence=0.5))
    with pytest.raises(DuplicateFactError):
        store.save(doc, **SCOPE)
    # Straight in SQL too: the partial index refuses a second live row, not a closed one.
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(**_row("fact_sql", "Prefers tea")))
    with store.engine.begin() as conn:
        conn.execute(sa.insert(memory_facts).values(**_row("fact_old", "Prefers tea", closed=True)))


def _row(fact_id: str, content: str, *, closed: bool = False) -> dict:
    return {
        "tenant_id": "acme",
        "user_id": "u1",
        "agent_name": "coder",
        "fact_id": fact_id,
        "content": content,
        "content_key": fact_digest(content),
        "category": "context",
        "confidence": 0.5,
        "created_at": NOW,
        "updated_at": NOW,
        "valid_to": NOW if closed else None,
    }


def test_writers_racing_for_one_live_key_leave_exactly_one(store):
    _save(store, Fact(id="fact_seed", content="Seed", confidence=0.5))
    writers = 8
    start = threading.Barrier(writers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(number: int) -> None:
        start.wait()
        while True:
            try:
                with store.engine.begin() as conn:
                    row = _row(f"fact_w{number}", "Racy")
                    conn.execute(sa.insert(memory_facts).values(**row))
                outcome = "won"
            except sa.exc.IntegrityError:
                outcome = "refused"
            except sa.exc.OperationalError:  # SQLite busy past its timeout: try again
                continue
            break
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["refused"] * (writers - 1) + ["won"]
    live = sa.select(sa.func.count()).where(
        memory_facts.c.content_key == fact_digest("Racy"), memory_facts.c.valid_to.is_(None)
    )
    with store.engine.connect() as conn:
        assert conn.execute(live).scalar() == 1


def test_two_stores_adding_one_text_at_once_keep_one_live_fact(url):
    first, second = SQLStorage(url), SQLStorage(url)
    try:
        _save(first, Fact(id="fact_seed", content="Seed", confidence=0.5))
        docs = [first.load(**SCOPE), second.load(**SCOPE)]
        start = threading.Barrier(2)
        results: list[object] = []

        def save(store: SQLStorage, doc: MemoryDocument, n: int) -> None:
            doc.facts.append(Fact(id=f"fact_same{n}", content="Same text", confidence=0.9))
            start.wait()
            try:
                results.append(store.save(doc, **SCOPE))
            except (VersionConflictError, DuplicateFactError) as exc:
                results.append(type(exc).__name__)

        threads = [
            threading.Thread(target=save, args=(s, d, n))
            for n, (s, d) in enumerate(zip((first, second), docs, strict=True))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(map(str, results)) == ["2", "VersionConflictError"]
        assert [f.content for f in first.load(**SCOPE).facts].count("Same text") == 1
    finally:
        first.close()
        second.close()


def test_forget_deletes_closed_facts_too(store):
    doc = _save(store, Fact(id="fact_gone", content="Old job", confidence=0.9))
    doc.facts = []
    store.save(doc, **SCOPE)
    assert _rows(store)
    deleted = ops.forget_user(store.engine, "u1", tenant_id="acme")
    assert deleted["memory_facts"] == 1
    assert _rows(store) == {}


def test_purge_deletes_only_old_closed_facts(store, url):
    doc = _save(
        store,
        Fact(id="fact_a", content="A", confidence=0.9),
        Fact(id="fact_b", content="B", confidence=0.9),
        Fact(id="fact_c", content="C", confidence=0.9),
    )
    doc.facts = [f for f in doc.facts if f.id == "fact_c"]
    store.save(doc, **SCOPE)
    with store.engine.begin() as conn:  # fact_a was closed long ago
        conn.execute(
            sa.update(memory_facts).where(memory_facts.c.fact_id == "fact_a").values(valid_to=OLD)
        )
    assert store.purge_closed(NOW - timedelta(days=30), tenant_id="other") == 0
    assert store.purge_closed(NOW - timedelta(days=30)) == 1
    assert set(_rows(store)) == {"fact_b", "fact_c"}
    result = CliRunner().invoke(app, ["db", "purge", "--url", url, "--older-than-days", "0"])
    assert result.exit_code == 0, result.output
    assert "purged 1 closed fact" in result.output
    assert set(_rows(store)) == {"fact_c"}
    assert [f.id for f in store.load(**SCOPE).facts] == ["fact_c"]


def test_the_service_purges_in_the_background_and_reads_the_past(url):
    store = SQLStorage(url)
    doc = _save(store, Fact(id="fact_a", content="A", confidence=0.9))
    moment = datetime.now(timezone.utc)
    doc.facts = []
    store.save(doc, **SCOPE)
    store.close()
    config = {"storage": url, "closed_fact_retention_days": 1, "purge_interval_seconds": 0.2}
    with MemoryService(config=MemoryConfig(**config)) as service:
        assert [f.id for f in service.load(**SCOPE, as_of=moment).facts] == ["fact_a"]
        assert service.load(**SCOPE).facts == []
        assert service.purge_closed() == 0  # closed today: kept for a day
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.update(memory_facts).values(valid_to=OLD))
    engine.dispose()
    with MemoryService(config=MemoryConfig(**config)) as service:
        deadline = datetime.now(timezone.utc) + timedelta(seconds=20)
        while service.load(**SCOPE, as_of=OLD - timedelta(seconds=1)).facts or _count(url):
            assert datetime.now(timezone.utc) < deadline, "the worker never purged"
            threading.Event().wait(0.1)


def _count(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(memory_facts)).scalar()
    finally:
        engine.dispose()


def test_closed_facts_are_not_searched_or_matched_unless_asked(store):
    doc = _save(
        store,
        Fact(id="fact_old", content="Works at Initech on billing", confidence=0.9),
        Fact(id="fact_new", content="Works at Acme on billing", confidence=0.9),
    )
    doc.facts = [f for f in doc.facts if f.id == "fact_new"]
    store.save(doc, **SCOPE)
    live = ops.search_facts(store.engine, "billing", tenant_id="acme")
    assert [r.fact.id for r in live] == ["fact_new"]
    every = ops.search_facts(store.engine, "billing", tenant_id="acme", include_closed=True)
    assert {r.fact.id for r in every} == {"fact_old", "fact_new"}
    closed = next(r for r in every if r.fact.id == "fact_old").to_dict()
    assert closed["valid_to"] is not None and closed["superseded_by"] is None
    doc = store.load(**SCOPE)
    matched = store.match_facts(doc, Scope.of(**SCOPE), query_terms("Initech billing"))
    assert [fact_id for fact_id, _ in matched] == ["fact_new"]


def test_closed_facts_do_not_count_toward_max_facts_or_the_report(store, llm):
    facts = [Fact(id=f"fact_{n:02d}", content=f"Fact {n}", confidence=0.8) for n in range(10)]
    doc = _save(store, *facts)
    doc.facts = doc.facts[:5]
    store.save(doc, **SCOPE)
    new = [
        {"content": f"New fact {n}", "category": "context", "confidence": 0.9, **LABELS}
        for n in range(5)
    ]
    llm.reply(json.dumps(update_reply(newFacts=new)))
    result = MemoryUpdater(llm_config(llm, max_facts=10), store).update_memory(
        CONVERSATION, thread_id="t1", **SCOPE
    )
    assert result.ok and len(result.facts_added) == 5 and result.facts_evicted == ()
    assert len(store.load(**SCOPE).facts) == 10
    report = build_report(store.engine, tenant_id="acme")
    assert report["totals"]["facts"] == 10
    assert sum(day["closed"] for day in report["superseded"]) == 5


def test_the_deerflow_round_trip_keeps_validity_and_confirmations(store):
    fact = Fact(
        id="fact_rt",
        content="Runs marathons",
        category="behavior",
        confidence=0.85,
        created_at=OLD,
        expected_valid_days=200,
        confirmed_at=NOW - timedelta(days=3),
        confirmation_count=4,
        valid_from=OLD - timedelta(days=10),
    )
    _save(store, fact)
    exported = store.load(**SCOPE).to_deerflow()
    [shown] = exported["facts"]
    assert shown["expected_valid_days"] == 200 and shown["confirmationCount"] == 4
    assert shown["lastConfirmedAt"].endswith("Z") and "validFrom" in shown
    other = dict(SCOPE, user_id="u2")
    imported = MemoryDocument.from_deerflow(json.dumps(exported))
    store.save(imported, **other)
    assert imported.to_deerflow()["facts"] == exported["facts"]  # exact, field by field
    again = store.load(**other).to_deerflow()

    def kept(facts: list) -> list:  # a save stamps updatedAt; every other field is kept
        return [{k: v for k, v in f.items() if k != "updatedAt"} for f in facts]

    assert kept(again["facts"]) == kept(exported["facts"])


# The review in the regular update ----------------------------------------------------------


def _stale_memory(store: SQLStorage) -> None:
    _save(
        store,
        Fact(
            id="fact_s1",
            content="Lives in Porto",
            category="context",
            confidence=0.6,
            created_at=OLD,
        ),
        Fact(
            id="fact_s2",
            content="Works at Initech",
            category="context",
            confidence=0.7,
            created_at=OLD,
        ),
        Fact(id="fact_s3", content="Learning Go", category="goal", confidence=0.8, created_at=OLD),
        Fact(
            id="fact_p",
            content="Never call me Bob",
            category="correction",
            confidence=0.95,
            created_at=OLD,
        ),
        Fact(id="fact_f", content="Likes Python", category="preference", confidence=0.9),
    )


def test_stale_facts_are_offered_in_the_same_prompt_removed_extended_and_capped(store, llm):
    _stale_memory(store)
    reply = update_reply(
        newFacts=[],
        staleFactsToRemove=[
            {"id": "fact_s1", "reason": "moved"},
            {"id": "fact_s2", "reason": "left"},
            {"id": "fact_p", "reason": "protected"},
            {"id": "fact_f", "reason": "not stale"},
            {"id": "fact_made_up", "reason": "invented"},
        ],
        staleFactsToExtend=[{"id": "fact_s3", "extend_by_days": 30, "reason": "still"}],
    )
    llm.reply(json.dumps(reply))
    config = llm_config(llm, staleness_max_removals_per_cycle=1)
    result = MemoryUpdater(config, store).update_memory(CONVERSATION, thread_id="t1", **SCOPE)
    assert result.ok and len(llm.requests) == 1  # no extra call
    prompt = llm.requests[0]["messages"][1]["content"]
    review = prompt[prompt.index("<review>") : prompt.index("</review>")]
    assert "fact_s1" in review and "fact_s2" in review and "fact_s3" in review
    assert "fact_p" not in review and "fact_f" not in review  # protected, not stale
    assert result.stale_offered == 3
    assert result.stale_removed == ("fact_s1",)  # the cap: lowest confidence first
    assert set(result.stale_refused) == {"fact_s2", "fact_p", "fact_f", "fact_made_up"}
    assert result.stale_extended == ("fact_s3",)
    doc = store.load(**SCOPE)
    held = {f.id: f for f in doc.facts}
    assert "fact_s1" not in held and {"fact_s2", "fact_p", "fact_f"} <= set(held)
    assert held["fact_s3"].expected_valid_days == (NOW - OLD).days + 30
    with store.engine.connect() as conn:
        row = conn.execute(
            sa.select(
                memory_llm_calls.c.stale_offered,
                memory_llm_calls.c.stale_removed,
                memory_llm_calls.c.stale_extended,
            )
        ).one()
    assert tuple(row) == (3, 1, 1)
    [usage] = build_report(store.engine, tenant_id="acme")["llm_usage"]
    assert (usage["stale_offered"], usage["stale_removed"], usage["stale_extended"]) == (3, 1, 1)


def test_few_candidates_or_a_small_budget_offer_none(store, llm):
    _stale_memory(store)
    for settings in ({"staleness_min_candidates": 4}, {"staleness_prompt_tokens": 50}):
        llm.reply(json.dumps(update_reply(newFacts=[], staleFactsToRemove=["fact_s1"])))
        result = MemoryUpdater(llm_config(llm, **settings), store).update_memory(
            CONVERSATION, thread_id="t1", **SCOPE
        )
        assert result.ok and result.stale_offered == 0 and result.stale_refused == ("fact_s1",)
        assert "<review>" not in llm.requests[-1]["messages"][1]["content"]
    assert "fact_s1" in {f.id for f in store.load(**SCOPE).facts}


def test_nothing_new_makes_no_call_unless_a_review_is_due(store, llm):
    _stale_memory(store)
    quiet = MemoryUpdater(llm_config(llm), store)
    assert quiet.update_from([], Scope.of(**SCOPE), "t1").llm_called is False
    due = MemoryUpdater(llm_config(llm, staleness_review_interval_hours=1), store)
    llm.reply(json.dumps(update_reply(user={}, newFacts=[], staleFactsToRemove=["fact_s1"])))
    result = due.update_from([], Scope.of(**SCOPE), "t1")
    assert result.llm_called and result.stale_removed == ("fact_s1",)
    assert "No new conversation" in llm.requests[-1]["messages"][1]["content"]
    # Reviewed within the interval: the watermark rule holds again.
    assert due.update_from([], Scope.of(**SCOPE), "t1").llm_called is False
    assert len(llm.requests) == 1


def test_validity_days_are_bounded_defaulted_and_confirmations_counted(store, llm):
    _save(store, Fact(id="fact_k", content="Knows Rust", category="knowledge", confidence=0.9))
    new = [
        {
            "content": "Is in Lisbon this week",
            "category": "context",
            "confidence": 0.9,
            "expectedValidDays": 7,
            **LABELS,
        },
        {
            "content": "Is a chess player",
            "category": "behavior",
            "confidence": 0.9,
            "expectedValidDays": 999_999,
            **LABELS,
        },
        {"content": "knows  RUST", "category": "knowledge", "confidence": 0.9, **LABELS},
    ]
    llm.reply(json.dumps(update_reply(newFacts=new, factsToReinforce=[{"id": "fact_k"}])))
    config = llm_config(llm, staleness_age_days=90, staleness_max_lifetime_multiplier=20)
    result = MemoryUpdater(config, store).update_memory(CONVERSATION, thread_id="t1", **SCOPE)
    assert result.ok and result.facts_confirmed == ("fact_k",)
    by_content = {f.content: f for f in store.load(**SCOPE).facts}
    assert by_content["Is in Lisbon this week"].expected_valid_days == 7
    assert by_content["Is a chess player"].expected_valid_days == 1800  # 90 × 20
    rust = by_content["Knows Rust"]
    assert rust.confirmation_count == 1 and rust.confirmed_at is not None  # said again: once
    from memory_sql.update.review import valid_days

    assert valid_days(rust, config) == config.staleness.category_days["knowledge"]


def test_a_replacing_fact_supersedes_and_near_duplicates_merge(store, llm):
    _save(
        store,
        Fact(id="fact_lis", content="Lives in Lisbon", category="context", confidence=0.9),
        Fact(
            id="fact_py1",
            content="Likes Python",
            category="preference",
            confidence=0.7,
            created_at=OLD,
        ),
        Fact(id="fact_py2", content="Enjoys Python a lot", category="preference", confidence=0.9),
        Fact(id="fact_tea", content="Drinks tea", category="preference", confidence=0.8),
    )
    reply = update_reply(
        newFacts=[
            {
                "content": "Lives in Porto",
                "category": "context",
                "confidence": 0.95,
                "replaces": ["fact_lis"],
                **LABELS,
            }
        ],
        factsToConsolidate=[
            {
                "sourceIds": ["fact_py1", "fact_py2"],
                "consolidated": {
                    "content": "Loves Python",
                    "category": "preference",
                    "confidence": 0.5,
                },
            },
            {
                "sourceIds": ["fact_tea", "fact_missing"],
                "consolidated": {"content": "Drinks things", "category": "preference"},
            },
        ],
    )
    llm.reply(json.dumps(reply))
    config = llm_config(llm, consolidation_enabled=True, consolidation_min_facts=3)
    result = MemoryUpdater(config, store).update_memory(CONVERSATION, thread_id="t1", **SCOPE)
    assert result.ok and len(result.facts_merged) == 1
    assert "Consolidation: the categories preference" in llm.requests[0]["messages"][1]["content"]
    assert set(result.facts_consolidated) == {"fact_py1", "fact_py2"}
    doc = store.load(**SCOPE)
    by_content = {f.content: f for f in doc.facts}
    assert "Lives in Lisbon" not in by_content and "Drinks tea" in by_content
    merged = by_content["Loves Python"]
    assert merged.confidence == 0.9 and merged.valid_from == OLD
    rows = _rows(store)
    assert rows["fact_py1"][1] == rows["fact_py2"][1] == merged.id
    assert rows["fact_lis"][1] == by_content["Lives in Porto"].id
    with store.engine.connect() as conn:
        merged_count = conn.execute(sa.select(memory_llm_calls.c.facts_merged)).scalar()
    assert merged_count == 2


# The migration -----------------------------------------------------------------------------


def _revision():
    path = Path(__file__).parent.parent / "alembic" / "versions" / "0015_fact_validity.py"
    spec = importlib.util.spec_from_file_location("rev0015", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def before_engine(request: pytest.FixtureRequest, tmp_path: Path):
    parent = _revision().down_revision
    if request.param == "sqlite":
        target = f"sqlite:///{tmp_path / 'before.db'}"
    else:
        target = request.getfixturevalue("new_pg_database")()
    engine = create_engine(target)
    migrations.upgrade(engine, parent)
    yield engine, parent
    engine.dispose()


def test_the_migration_keeps_facts_and_goes_down_to_its_parent(before_engine):
    engine, parent = before_engine
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version, created_at, "
            "updated_at) VALUES ('acme', 'u1', 'coder', 1, '2026-01-01', '2026-01-01')"
        )
        conn.exec_driver_sql(
            "INSERT INTO memory_facts (tenant_id, user_id, agent_name, fact_id, content, "
            "content_key, category, confidence, created_at, updated_at, search_text) VALUES "
            f"('acme', 'u1', 'coder', 'fact_m', 'Plays chess', '{fact_digest('Plays chess')}', "
            "'context', 0.9, '2026-01-01', '2026-01-01', 'plays chess')"
        )
    before = _shape(engine)
    migrations.upgrade(engine, "0015")
    at_head = migrations.current_revision(engine) == migrations.head_revision()
    assert not at_head or migrations.check(engine) is None  # check compares with the head
    after = _shape(engine)
    # Every view and table there before is there after, with its columns (0015 adds some).
    for kind in ("views", "tables"):
        for name, (columns, *_) in before[kind].items():
            assert set(columns) <= set(after[kind][name][0]), name
    assert "memory_report_superseded" in after["views"]
    assert "held_over_budget" in after["views"]["memory_report_llm_usage"][0]
    assert {"stale_offered", "facts_merged"} <= set(after["views"]["memory_report_llm_usage"][0])
    store = SQLStorage(engine) if at_head else None
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(
                memory_facts.c.valid_from,
                memory_facts.c.valid_to,
                memory_facts.c.confirmation_count,
            )
        ).one()
    assert tuple(row) == (None, None, 0)
    if store is not None:
        [fact] = store.load(**SCOPE).facts
        assert fact.since == fact.created_at and fact.content == "Plays chess"
        # the index follows the closing of a fact
        doc = store.load(**SCOPE)
        assert store.match_facts(doc, Scope.of(**SCOPE), ["chess"])
        doc.facts = []
        store.save(doc, **SCOPE)
        assert store.match_facts(doc, Scope.of(**SCOPE), ["chess"]) == []
    migrations.downgrade(engine, parent)
    assert _shape(engine) == before  # exactly the parent's tables, constraints and views
    columns = {c["name"] for c in sa.inspect(engine).get_columns("memory_facts")}
    assert "valid_to" not in columns and "superseded_by" not in columns
    with engine.connect() as conn:
        left = conn.exec_driver_sql("SELECT count(*) FROM memory_facts").scalar()
        views = conn.exec_driver_sql("SELECT count(*) FROM memory_report_categories").scalar()
    assert left == (0 if store is not None else 1) and views == left


def test_an_id_used_again_after_its_fact_was_closed_is_stored(store):
    doc = _save(store, Fact(id="fact_again", content="Old text", confidence=0.9))
    doc.facts = []
    store.save(doc, **SCOPE)
    doc = _save(store, Fact(id="fact_again", content="New text", confidence=0.9))
    assert [(f.id, f.content) for f in doc.facts] == [("fact_again", "New text")]
    assert set(_rows(store)) == {"fact_again"}
    events, _ = history.change_log(store.engine, Scope.of(**SCOPE), fact_id="fact_again")
    assert [e["event"] for e in events] == ["added", "removed", "added"]


def _shape(engine: sa.Engine) -> dict[str, dict[str, tuple]]:
    """Each table's and view's columns, and each table's checks, unique constraints and
    indexes, by name."""
    inspector = sa.inspect(engine)
    tables = {
        name: (
            sorted(c["name"] for c in inspector.get_columns(name)),
            sorted(
                " ".join(str(c["sqltext"]).split()) for c in inspector.get_check_constraints(name)
            ),
            sorted(str(u["name"]) for u in inspector.get_unique_constraints(name)),
            sorted(str(i["name"]) for i in inspector.get_indexes(name)),
        )
        for name in inspector.get_table_names()
        if name.startswith("memory_") and not name.startswith("memory_facts_fts")
    }
    views = {
        name: (sorted(c["name"] for c in inspector.get_columns(name)),)
        for name in inspector.get_view_names()
        if name.startswith("memory_")
    }
    return {"tables": tables, "views": views}
