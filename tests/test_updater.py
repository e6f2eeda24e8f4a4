"""Applying LLM updates: the rules one by one (pure), then whole updates through a real LLM
server and real SQLite / PostgreSQL stores, conflicts included, and two racing processes."""

from __future__ import annotations

import json
import multiprocessing
import re
import threading
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from _workers import run_memory_update
from conftest import assert_no_checked_out_connections
from llm_server import (
    FLAWED_REPLIES,
    LABELS,
    MALFORMED_REPLIES,
    ScriptedLLM,
    llm_config,
    update_reply,
)

from memory_sql.config import MemoryConfig
from memory_sql.errors import InvalidMessageError, InvalidScopeError
from memory_sql.intake.filter import filter_messages_for_memory
from memory_sql.models import Fact, MemoryDocument, Section, fact_key
from memory_sql.schema import memory_facts, memory_scopes, memory_sections
from memory_sql.scope import Scope
from memory_sql.storage import MemoryStorage, SQLStorage, open_storage
from memory_sql.update.parser import parse_update
from memory_sql.update.updater import MAX_SAVE_ATTEMPTS, MemoryUpdater, apply_update

NOW = datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc)
EARLIER = NOW - timedelta(days=30)
CONVERSATION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "I'm a backend engineer at Acme and I prefer Python."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    {"role": "tool", "content": "result", "tool_call_id": "c1"},
    {"role": "assistant", "content": "Noted: Python it is."},
]


def _fact(fact_id: str, content: str, confidence: float = 0.8, **fields) -> Fact:
    fields.setdefault("created_at", EARLIER)
    return Fact(id=fact_id, content=content, confidence=confidence, **fields)


def _apply(memory: MemoryDocument, reply: dict, **config):
    settings = {"max_facts": 10, "min_confidence": 0.7, **config}
    return apply_update(
        memory,
        parse_update(json.dumps(reply)),
        thread_id="thread-1",
        config=MemoryConfig(**settings),
        now=NOW,
    )


def _reply(*, facts=(), remove=(), user=None, history=None) -> dict:
    """A reply whose facts and sections all carry the labels the scope gate stores."""
    return {
        "user": _labelled(user or {}),
        "history": _labelled(history or {}),
        "newFacts": [
            {"content": c, "confidence": conf, "category": cat, **LABELS} for c, conf, cat in facts
        ],
        "factsToRemove": list(remove),
    }


def _labelled(sections: dict) -> dict:
    return {
        name: {**LABELS, **section} if isinstance(section, dict) else section
        for name, section in sections.items()
    }


# apply_update, rule by rule ----------------------------------------------------------------


def test_sections_marked_for_update_are_replaced_and_stamped():
    memory = MemoryDocument()
    memory.user.work_context = Section(summary="Student.", updated_at=EARLIER)
    memory.user.top_of_mind = Section(summary="Thesis.", updated_at=EARLIER)
    reply = _reply(
        user={
            "workContext": {"summary": "Backend engineer at Acme.", "shouldUpdate": True},
            "topOfMind": {"summary": "Ignored", "shouldUpdate": False},
            "personalContext": {"summary": "", "shouldUpdate": True},
        },
        history={"recentMonths": {"summary": "Joined Acme.", "shouldUpdate": True}},
    )
    doc, changes = _apply(memory, reply)
    assert changes.sections_updated == ("work_context", "recent_months")
    assert doc.user.work_context == Section(summary="Backend engineer at Acme.", updated_at=NOW)
    assert doc.history.recent_months == Section(summary="Joined Acme.", updated_at=NOW)
    assert doc.user.top_of_mind == Section(summary="Thesis.", updated_at=EARLIER)
    assert doc.user.personal_context.summary == ""
    assert doc.last_updated == NOW


def test_a_section_rewritten_with_the_same_text_is_no_change():
    memory = MemoryDocument()
    memory.user.work_context = Section(summary="Engineer.", updated_at=EARLIER)
    reply = _reply(user={"workContext": {"summary": "Engineer.", "shouldUpdate": True}})
    doc, changes = _apply(memory, reply)
    assert not changes
    assert doc.user.work_context.updated_at == EARLIER
    assert doc.last_updated is None


def test_removals_by_id_and_unknown_ids_ignored():
    memory = MemoryDocument(facts=[_fact("f1", "Uses vim"), _fact("f2", "Uses emacs")])
    doc, changes = _apply(memory, _reply(remove=["f2", "nope", "f2", "fact_zzz"]))
    assert [f.id for f in doc.facts] == ["f1"]
    assert changes.facts_removed == ("f2",)
    assert changes.ignored_removals == ("nope", "fact_zzz")


def test_new_facts_need_min_confidence():
    doc, changes = _apply(
        MemoryDocument(),
        _reply(facts=[("At threshold", 0.7, "goal"), ("Below", 0.69, "goal"), ("Sure", 1, "goal")]),
    )
    assert sorted(f.content for f in doc.facts) == ["At threshold", "Sure"]
    assert len(changes.facts_added) == 2
    assert ("Below", "low confidence") in changes.skipped_facts


def test_new_facts_skip_casefold_duplicates_of_kept_facts_and_of_each_other():
    memory = MemoryDocument(facts=[_fact("f1", "Prefers Python"), _fact("f2", "Lives in Berlin")])
    reply = _reply(
        facts=[
            ("PREFERS   python", 0.9, "preference"),
            ("Wohnt in der Straße", 0.9, "context"),
            ("wohnt in der STRASSE", 0.95, "context"),
            ("Lives in Munich", 0.9, "context"),
        ],
        remove=["f2"],
    )
    doc, changes = _apply(memory, reply)
    assert sorted(f.content for f in doc.facts) == [
        "Lives in Munich",
        "Prefers Python",
        "Wohnt in der Straße",
    ]
    assert [r for _, r in changes.skipped_facts] == ["duplicate", "duplicate"]
    assert len({fact_key(f.content) for f in doc.facts}) == len(doc.facts)


def test_a_removed_fact_can_come_back_reworded_in_the_same_update():
    memory = MemoryDocument(facts=[_fact("f1", "Prefers Python", 0.7)])
    doc, changes = _apply(
        memory, _reply(facts=[("prefers python", 0.95, "preference")], remove=["f1"])
    )
    assert [(f.content, f.confidence) for f in doc.facts] == [("prefers python", 0.95)]
    assert changes.facts_removed == ("f1",)
    assert changes.facts_added == (doc.facts[0].id,)


def test_new_facts_are_stamped_with_thread_and_time():
    doc, changes = _apply(
        MemoryDocument(),
        _reply(facts=[("Uses pnpm", 0.95, "Correction")])
        | {
            "newFacts": [
                {
                    "content": "Uses pnpm",
                    "category": "Correction",
                    "confidence": 0.95,
                    "sourceError": "suggested npm",
                    **LABELS,
                }
            ]
        },
    )
    [fact] = doc.facts
    assert changes.facts_added == (fact.id,)
    assert re.fullmatch(r"fact_[0-9a-f]{12}", fact.id)
    assert (fact.category, fact.source_error, fact.source_thread_id) == (
        "correction",
        "suggested npm",
        "thread-1",
    )
    assert fact.created_at == fact.updated_at == NOW
    assert doc.last_updated == NOW


def test_the_cap_evicts_lowest_confidence_then_oldest():
    facts = [_fact(f"f{i}", f"fact {i}", 0.9) for i in range(8)]
    facts.append(_fact("old_low", "old low", 0.75, created_at=EARLIER - timedelta(days=1)))
    facts.append(_fact("new_low", "new low", 0.75))
    memory = MemoryDocument(facts=facts)
    doc, changes = _apply(memory, _reply(facts=[("Brand new", 0.8, "goal")]))
    assert len(doc.facts) == 10
    assert changes.facts_evicted == ("old_low",)
    assert len(changes.facts_added) == 1
    doc, changes = _apply(memory, _reply(facts=[("A", 0.8, "goal"), ("B", 0.95, "goal")]))
    assert changes.facts_evicted == ("old_low", "new_low")
    assert len(doc.facts) == 10


def test_a_new_fact_below_everything_is_not_added_when_memory_is_full():
    memory = MemoryDocument(facts=[_fact(f"f{i}", f"fact {i}", 0.9) for i in range(10)])
    doc, changes = _apply(memory, _reply(facts=[("Weak but allowed", 0.7, "goal")]))
    assert [f.id for f in doc.facts] == [f"f{i}" for i in range(10)]
    assert changes.facts_added == () and changes.facts_evicted == ()
    assert ("Weak but allowed", "over max_facts") in changes.skipped_facts
    assert not changes


def test_guaranteed_categories_are_evicted_only_when_nothing_else_is_left():
    corrections = [_fact(f"c{i}", f"correction {i}", 0.71, category="correction") for i in range(9)]
    memory = MemoryDocument(facts=[*corrections, _fact("p", "preference", 0.95)])
    doc, changes = _apply(memory, _reply(facts=[("Another", 0.99, "goal")]))
    assert changes.facts_evicted == ("p",)  # far above the corrections, but not guaranteed
    assert {f.id for f in doc.facts} == {f"c{i}" for i in range(9)} | set(changes.facts_added)

    memory = MemoryDocument(
        facts=corrections + [_fact("c9", "correction 9", 0.7, category="correction")]
    )
    doc, changes = _apply(memory, _reply(facts=[("Fix", 0.99, "correction")]))
    assert changes.facts_evicted == ("c9",)  # only guaranteed facts left: lowest goes
    # Another guaranteed list protects other categories instead.
    memory = MemoryDocument(facts=[*corrections, _fact("p", "preference", 0.8)])
    doc, changes = _apply(
        memory, _reply(facts=[("Another", 0.99, "goal")]), guaranteed_categories=["preference"]
    )
    assert changes.facts_evicted == ("c0",)


def test_upload_mentions_are_kept_out():
    memory = MemoryDocument(
        facts=[_fact("f1", "Uploaded files to /mnt/user-data/uploads/a.csv"), _fact("f2", "Uses R")]
    )
    memory.history.recent_months = Section(summary="Analysed sales. The user uploaded a PDF file.")
    reply = _reply(
        facts=[
            ("Uploaded a spreadsheet file about sales", 0.9, "context"),
            ("Likes R", 0.9, "pref"),
        ],
        user={
            "topOfMind": {
                "summary": "Sales analysis. They uploaded three CSV files.",
                "shouldUpdate": True,
            }
        },
    )
    doc, changes = _apply(memory, reply)
    assert sorted(f.content for f in doc.facts) == ["Likes R", "Uses R"]
    assert changes.facts_removed == ("f1",)
    assert ("Uploaded a spreadsheet file about sales", "upload") in changes.skipped_facts
    assert doc.user.top_of_mind.summary == "Sales analysis."
    assert doc.history.recent_months.summary == "Analysed sales."
    assert changes.sections_updated == ("top_of_mind", "recent_months")


def test_apply_does_not_touch_its_input():
    memory = MemoryDocument(facts=[_fact(f"f{i}", f"fact {i}", 0.8) for i in range(10)])
    memory.user.work_context = Section(summary="Old.")
    before = memory.model_dump_json()
    _apply(
        memory,
        _reply(
            facts=[("New", 0.9, "goal")],
            remove=["f1"],
            user={"workContext": {"summary": "New.", "shouldUpdate": True}},
        ),
    )
    assert memory.model_dump_json() == before


# MemoryUpdater with real stores and a real LLM server ----------------------------------------

SQL_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(params=SQL_BACKENDS)
def sql_target(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def store(sql_target: str):
    storage = open_storage(sql_target)
    yield storage
    assert_no_checked_out_connections(storage)
    storage.close()


def _seed(store: MemoryStorage, scope: dict) -> MemoryDocument:
    doc = MemoryDocument(
        facts=[
            _fact("fact_seed1", "Prefers tabs", 0.9),
            _fact("fact_seed2", "Uses vim", 0.8, category="behavior"),
        ]
    )
    doc.user.personal_context = Section(summary="Lives in Lisbon.")
    store.save(doc, **scope, expected_version=0)
    return store.load(**scope)


def _snapshot(store: SQLStorage, scope: dict) -> str:
    """The scope's stored rows, every column, as text; and the loaded document."""
    key = Scope.of(**scope)
    parts = []
    with store.engine.connect() as conn:
        for table in (memory_scopes, memory_sections, memory_facts):
            rows = conn.execute(
                sa.select(table).where(
                    table.c.tenant_id == key.tenant_id,
                    table.c.user_id == key.user_id,
                    table.c.agent_name == key.agent_key,
                )
            ).all()
            parts.append(sorted(repr(tuple(row)) for row in rows))
    doc = store.load(**scope)
    parts.append([json.dumps(doc.to_deerflow(), sort_keys=True), str(doc.version)])
    return json.dumps(parts)


def test_update_from_a_conversation(store, scope, llm):
    _seed(store, scope)
    reply = update_reply(
        newFacts=[
            {"content": "Prefers Python", "category": "preference", "confidence": 0.9, **LABELS},
            {"content": "prefers tabs", "category": "preference", "confidence": 0.95, **LABELS},
        ],
        factsToRemove=["fact_seed2", "fact_unknown"],
    )
    llm.reply(
        f"<think>thinking</think>\n```json\n{json.dumps(reply)}\n```",
        prompt_tokens=900,
        completion_tokens=80,
    )
    updater = MemoryUpdater(llm_config(llm), store)
    result = updater.update_memory(CONVERSATION, thread_id="t-1", **scope)
    assert result.ok and result.error is None
    assert result.llm_called and result.attempts == 1
    assert (result.prompt_tokens, result.completion_tokens) == (900, 80)
    assert result.facts_removed == ("fact_seed2",)
    assert result.sections_updated == ("work_context",)
    assert result.facts_evicted == ()
    assert result.changed
    doc = store.load(**scope)
    assert result.version == doc.version == 2
    [added] = result.facts_added
    assert {f.id: f.content for f in doc.facts} == {
        "fact_seed1": "Prefers tabs",
        added: "Prefers Python",
    }
    assert doc.facts[-1].source_thread_id == "t-1"
    assert doc.user.work_context.summary == "Backend engineer at Acme."
    assert doc.user.personal_context.summary == "Lives in Lisbon."
    prompt = llm.requests[0]["messages"][1]["content"]
    assert "fact_seed2 | behavior | 0.80 | Uses vim" in prompt
    assert "User: I'm a backend engineer at Acme and I prefer Python." in prompt
    assert "Assistant: Noted: Python it is." in prompt
    assert "result" not in prompt.split("<conversation>")[1]
    updater.close()


def test_malformed_replies_leave_the_memory_byte_for_byte_unchanged(store, scope, llm):
    _seed(store, scope)
    before = _snapshot(store, scope)
    updater = MemoryUpdater(llm_config(llm, llm_max_retries=0, llm_repair_attempts=0), store)
    cases = {**MALFORMED_REPLIES, "null content": None, "HTTP 500": "server down"}
    for name, reply in cases.items():
        llm.reply(reply, status=500 if name == "HTTP 500" else 200)
        result = updater.update_memory(CONVERSATION, thread_id="t-bad", **scope)
        assert not result.ok, name
        assert result.error and "\n" not in result.error, name
        assert result.llm_called and result.version is None and not result.changed, name
        assert _snapshot(store, scope) == before, name
    assert len(llm.requests) == len(cases)
    # The same updater still works afterwards.
    llm.reply(json.dumps(update_reply()))
    assert updater.update_memory(CONVERSATION, thread_id="t-good", **scope).changed
    assert _snapshot(store, scope) != before


@pytest.mark.parametrize("name", list(FLAWED_REPLIES))
def test_a_flawed_reply_stores_its_good_parts_only(store, scope, llm, name):
    _seed(store, scope)
    reply, reason, sections, facts = FLAWED_REPLIES[name]
    llm.reply(reply)
    result = MemoryUpdater(llm_config(llm), store).update_memory(
        CONVERSATION, thread_id="t-flawed", **scope
    )
    assert result.ok and result.rejected == {reason: 1}
    assert len(llm.requests) == 1  # a reply with a usable part is not asked for again
    doc = store.load(**scope)
    added = [f.content for f in doc.facts if f.id in result.facts_added]
    assert added == facts
    assert set(result.sections_updated) == set(sections)


def test_failures_are_logged_with_scope_and_thread(store, scope, llm, caplog):
    llm.reply("not json at all")
    result = MemoryUpdater(llm_config(llm, llm_repair_attempts=0), store).update_memory(
        CONVERSATION, thread_id="t-log", **scope
    )
    assert result.error == "invalid memory update from the LLM: no JSON object in the reply"
    [record] = [r for r in caplog.records if r.name == "memory_sql.update.updater"]
    assert record.levelname == "WARNING"
    assert scope["user_id"] in record.getMessage() and "t-log" in record.getMessage()
    assert "sk-test" not in caplog.text


def test_no_model_configured_fails_the_update_not_the_caller(store, scope):
    from memory_sql.update.llm import LLMClient

    config = MemoryConfig(llm_base_url="http://127.0.0.1:9/v1")
    updater = MemoryUpdater(config, store, LLMClient.from_config(config, env={}))
    result = updater.update_memory(CONVERSATION, thread_id="t", **scope)
    assert not result.ok
    assert "set model_name (or MEMORY_SQL_MODEL_NAME / OPENAI_MODEL)" in result.error
    assert store.load(**scope).version == 0


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([], id="empty"),
        pytest.param([{"role": "assistant", "content": "Hello!"}], id="assistant only"),
        pytest.param(
            [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "Sure."}],
            id="trivial",
        ),
        pytest.param(
            [{"role": "user", "content": "<uploaded_files>a.csv</uploaded_files>"}], id="upload"
        ),
    ],
)
def test_nothing_to_learn_does_not_call_the_llm(store, scope, llm, messages):
    result = MemoryUpdater(llm_config(llm), store).update_memory(messages, thread_id="t", **scope)
    assert result.ok and not result.llm_called and not result.changed
    assert result.attempts == 0
    assert llm.requests == []
    assert store.load(**scope).version == 0


def test_invalid_arguments_raise(store, llm):
    updater = MemoryUpdater(llm_config(llm), store)
    with pytest.raises(InvalidScopeError, match="user_id"):
        updater.update_memory(CONVERSATION, thread_id="t", user_id="../etc")
    with pytest.raises(InvalidScopeError, match="thread_id"):
        updater.update_memory(CONVERSATION, thread_id="")
    with pytest.raises(InvalidScopeError, match="thread_id"):
        updater.update_memory(CONVERSATION, thread_id="t" * 300)
    with pytest.raises(InvalidMessageError, match="message 1"):
        updater.update_memory([{"role": "user", "content": "hi"}, 42], thread_id="t")
    assert llm.requests == []


def test_message_objects_are_accepted_and_filtering_is_idempotent(store, scope, llm):
    from memory_sql.intake.filter import filter_messages_for_memory

    llm.responder = lambda body: json.dumps(update_reply(user={}, newFacts=[]))
    updater = MemoryUpdater(llm_config(llm), store)
    updater.update_memory(CONVERSATION, thread_id="t", **scope)
    updater.update_memory(filter_messages_for_memory(CONVERSATION), thread_id="t", **scope)
    first, second = (body["messages"] for body in llm.requests)
    assert first == second


def test_correction_mode_reaches_the_prompt(store, scope, llm):
    llm.responder = lambda body: json.dumps(update_reply(newFacts=[]))
    updater = MemoryUpdater(llm_config(llm), store)
    updater.update_memory(CONVERSATION, thread_id="t", **scope)
    updater.update_memory(CONVERSATION, thread_id="t", correction_detected=True, **scope)
    updater.update_memory(CONVERSATION, thread_id="t", reinforcement_detected=True, **scope)
    prompts = [body["messages"][1]["content"] for body in llm.requests]
    assert "<mode>normal</mode>" in prompts[0]
    assert "<mode>correction</mode>" in prompts[1]
    assert "<mode>reinforcement</mode>" in prompts[2]


def test_an_update_that_changes_nothing_saves_nothing(store, scope, llm):
    _seed(store, scope)
    llm.reply(
        json.dumps(update_reply(user={}, newFacts=[{"content": "uses VIM", "confidence": 1}]))
    )
    result = MemoryUpdater(llm_config(llm), store).update_memory(
        CONVERSATION, thread_id="t", **scope
    )
    assert result.ok and not result.changed
    assert result.attempts == 0 and result.version == 1


def test_a_version_conflict_reapplies_the_same_reply(store, sql_target, scope, llm):
    _seed(store, scope)
    rival = open_storage(sql_target)

    def answer_after_a_rival_save(body):
        doc = rival.load(**scope)
        doc.facts.append(Fact(content="Rival fact", confidence=0.9))
        doc.history.earlier_context = Section(summary="Rival history.")
        rival.save(doc, **scope)
        return json.dumps(update_reply(factsToRemove=["fact_seed1"]))

    llm.responder = answer_after_a_rival_save
    result = MemoryUpdater(llm_config(llm), store).update_memory(
        CONVERSATION, thread_id="t", **scope
    )
    rival.close()
    assert result.ok, result.error
    assert result.attempts == 2
    assert len(llm.requests) == 1
    doc = store.load(**scope)
    assert result.version == doc.version == 3
    assert sorted(f.content for f in doc.facts) == ["Prefers Python", "Rival fact", "Uses vim"]
    assert doc.history.earlier_context.summary == "Rival history."
    assert doc.user.work_context.summary == "Backend engineer at Acme."


class _RivalledStorage(MemoryStorage):
    """A real store where another writer always saves just before this one does."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner
        self.rival_saves = 0

    def _where(self, scope: Scope) -> dict:
        return {
            "user_id": scope.user_id,
            "agent_name": scope.agent_name,
            "tenant_id": scope.tenant_id,
        }

    def _load(self, scope: Scope) -> MemoryDocument:
        return self.inner.load(**self._where(scope))

    def _save(self, scope: Scope, doc: MemoryDocument, expected_version: int) -> int:
        theirs = self.inner.load(**self._where(scope))
        self.rival_saves += 1
        theirs.facts.append(Fact(content=f"rival {self.rival_saves}", confidence=0.9))
        self.inner.save(theirs, **self._where(scope))
        return self.inner.save(doc, **self._where(scope), expected_version=expected_version)


def test_conflicts_exhausted_report_a_failure(store, scope, llm):
    _seed(store, scope)
    rivalled = _RivalledStorage(store)
    llm.reply(json.dumps(update_reply()))
    result = MemoryUpdater(llm_config(llm), rivalled).update_memory(
        CONVERSATION, thread_id="t", **scope
    )
    assert not result.ok and result.conflicted
    assert result.attempts == MAX_SAVE_ATTEMPTS
    assert result.error.startswith(f"gave up after {MAX_SAVE_ATTEMPTS} version conflicts")
    assert len(llm.requests) == 1
    doc = store.load(**scope)
    rivals = [f"rival {n}" for n in range(1, MAX_SAVE_ATTEMPTS + 1)]
    assert sorted(f.content for f in doc.facts) == ["Prefers tabs", "Uses vim", *rivals]
    assert doc.user.work_context.summary == ""

    # The reply it lost with is applied later, once the rival is gone, without the LLM.
    again = MemoryUpdater(llm_config(llm), store).update_from(
        [], Scope.of(**scope), "t", reply=result.reply
    )
    assert again.ok is True and not again.changed  # no user turn: nothing to apply
    again = MemoryUpdater(llm_config(llm), store).update_from(
        filter_messages_for_memory(CONVERSATION), Scope.of(**scope), "t", reply=result.reply
    )
    assert again.ok and again.changed and not again.llm_called
    assert len(llm.requests) == 1
    assert store.load(**scope).user.work_context.summary == "Backend engineer at Acme."


@pytest.mark.slow
def test_two_processes_racing_on_one_scope_both_land(sql_target, scope, llm):
    arrived = threading.Barrier(2, timeout=60)

    def per_worker_reply(body):
        worker = re.search(r"I am worker (\w+)", body["messages"][1]["content"]).group(1)
        arrived.wait()  # both have loaded the memory before either gets its answer
        return json.dumps(
            update_reply(
                newFacts=[
                    {"content": "Shared fact", "confidence": 0.9, **LABELS},
                    {"content": f"Fact of worker {worker}", "confidence": 0.9, **LABELS},
                ]
            )
        )

    llm.responder = per_worker_reply
    settings = {
        "model_name": "test-model",
        "llm_base_url": llm.base_url,
        "llm_api_key": "sk-test",
        "llm_max_retries": 0,
        "llm_timeout_seconds": 60,
    }
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = ["a", "b"]
    processes = [
        context.Process(
            target=run_memory_update,
            args=(sql_target, scope, settings, f"thread-{w}", f"I am worker {w}", start, results),
        )
        for w in workers
    ]
    for process in processes:
        process.start()
    start.set()
    reports = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert all(r["ok"] for r in reports.values()), reports
    assert sorted(r["attempts"] for r in reports.values()) == [1, 2]
    assert len(llm.requests) == 2
    with open_storage(sql_target) as check:
        doc = check.load(**scope)
    contents = sorted(f.content for f in doc.facts)
    assert contents == ["Fact of worker a", "Fact of worker b", "Shared fact"]
    assert doc.version == 2
    assert {f.source_thread_id for f in doc.facts if "worker" in f.content} == {
        "thread-a",
        "thread-b",
    }


def test_scope_isolation(store, llm):
    one = {"user_id": f"u-{uuid.uuid4().hex[:8]}"}
    two = {"user_id": f"u-{uuid.uuid4().hex[:8]}", "agent_name": "Coder"}
    llm.responder = lambda body: json.dumps(update_reply())
    updater = MemoryUpdater(llm_config(llm), store)
    assert updater.update_memory(CONVERSATION, thread_id="t", **one).ok
    assert store.load(user_id=two["user_id"], agent_name="coder").version == 0
    assert updater.update_memory(CONVERSATION, thread_id="t", **two).ok
    assert store.load(user_id=two["user_id"], agent_name="coder").version == 1
    assert store.load(**one).version == 1


def test_a_shared_llm_client_is_not_closed_by_the_updater(store, scope, llm):
    from memory_sql.update.llm import LLMClient

    client = LLMClient.from_config(llm_config(llm), env={})
    llm.responder = lambda body: json.dumps(update_reply())
    updater = MemoryUpdater(llm_config(llm), store, client)
    assert updater.update_memory(CONVERSATION, thread_id="t", **scope).ok
    updater.close()
    assert client._client is not None
    client.close()


def test_the_scripted_server_is_reusable(llm: ScriptedLLM):
    assert llm.base_url.startswith("http://127.0.0.1:") and llm.base_url.endswith("/v1")
    assert llm.pending == 0
