"""An unusable reply is recorded as a call of its own, then asked for again with something
changed (a repair message naming the problem, a warmer temperature); a reply cut at
``max_tokens`` is recorded as ``length`` with its real token counts; refused reply parts are
counted by reason in the result, the log, the usage tables and their view."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
import sqlalchemy as sa
from llm_server import FLAWED_REPLIES, LABELS, llm_config, update_reply

from memory_sql.ops.reports import build_report, llm_rejections_view
from memory_sql.schema import memory_llm_calls, memory_llm_rejections
from memory_sql.storage import open_storage
from memory_sql.update.prompt import CUT_INSTRUCTION
from memory_sql.update.updater import REPAIR_TEMPERATURE_STEP, MemoryUpdater

CHAT = [
    {"role": "user", "content": "I am a backend engineer at Acme and I prefer Python."},
    {"role": "assistant", "content": "Noted."},
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def _calls(storage, tenant: str) -> list:
    with storage.engine.connect() as conn:
        return conn.execute(
            sa.select(memory_llm_calls)
            .where(memory_llm_calls.c.tenant_id == tenant)
            .order_by(memory_llm_calls.c.called_at)
        ).all()


def _refused(storage, tenant: str) -> dict[str, int]:
    r = memory_llm_rejections.c
    with storage.engine.connect() as conn:
        rows = conn.execute(
            sa.select(r.reason, sa.func.sum(r["items"]))
            .where(r.tenant_id == tenant)
            .group_by(r.reason)
        ).all()
    return {reason: int(items) for reason, items in rows}


def test_an_unusable_reply_is_asked_for_again_with_the_problem_named(url, llm, caplog):
    tenant = f"t{uuid.uuid4().hex[:8]}"
    storage = open_storage(url)
    updater = MemoryUpdater(llm_config(llm), storage)
    caplog.set_level(logging.INFO, logger="memory_sql.update.updater")
    try:
        echoed = update_reply(newFacts=[{"content": "...", "confidence": 0.9, **LABELS}])
        echoed["user"] = "<the complete new summary>"
        llm.reply(json.dumps(echoed), prompt_tokens=1000, completion_tokens=50)
        llm.reply(json.dumps(update_reply()), prompt_tokens=1100, completion_tokens=60)
        result = updater.update_memory(CHAT, thread_id="t1", user_id="u1", tenant_id=tenant)
        doc = storage.load(user_id="u1", tenant_id=tenant)
        calls = _calls(storage, tenant)
        refused = _refused(storage, tenant)
    finally:
        updater.close()
        storage.close()
    assert result.ok and result.llm_calls == 2
    assert [f.content for f in doc.facts] == ["Prefers Python"]
    assert (result.prompt_tokens, result.completion_tokens) == (2100, 110)
    assert result.rejected == {"malformed": 1, "placeholder": 1}
    first, second = llm.requests
    assert first["temperature"] == 0.0
    assert second["temperature"] == pytest.approx(REPAIR_TEMPERATURE_STEP)
    assert second["messages"][:2] == first["messages"]
    repair = second["messages"][2]
    assert repair["role"] == "user"
    assert (
        "could not be used: invalid memory update from the LLM: no usable part"
        in (repair["content"])
    )
    assert "placeholder" in repair["content"]
    assert [(c.outcome, c.prompt_tokens, c.completion_tokens) for c in calls] == [
        ("invalid_reply", 1000, 50),
        ("ok", 1100, 60),
    ]
    assert refused == {"malformed": 1, "placeholder": 1}
    assert "asking again (1 of 1)" in caplog.text


def test_a_cut_reply_is_recorded_as_length_with_its_tokens_and_asked_shorter(url, llm):
    tenant = f"t{uuid.uuid4().hex[:8]}"
    storage = open_storage(url)
    updater = MemoryUpdater(llm_config(llm, llm_max_tokens=200), storage)
    try:
        runaway = json.dumps(update_reply())[:150]
        llm.reply(runaway, prompt_tokens=1500, completion_tokens=200, finish_reason="length")
        llm.reply(runaway, prompt_tokens=1600, completion_tokens=200, finish_reason="length")
        result = updater.update_memory(CHAT, thread_id="t1", user_id="u1", tenant_id=tenant)
        calls = _calls(storage, tenant)
        version = storage.load(user_id="u1", tenant_id=tenant).version
    finally:
        updater.close()
        storage.close()
    assert not result.ok and version == 0
    assert "cut at max_tokens" in result.error
    assert [(c.outcome, c.prompt_tokens, c.completion_tokens) for c in calls] == [
        ("length", 1500, 200),
        ("length", 1600, 200),
    ]
    assert all(body["max_tokens"] == 200 for body in llm.requests)
    cut_note = llm.requests[1]["messages"][-1]["content"]
    assert cut_note == CUT_INSTRUCTION.format(tokens=200)
    assert llm.requests[1]["temperature"] > llm.requests[0]["temperature"]


def test_no_repair_when_switched_off_and_a_retry_starts_warmer(tmp_path, llm):
    storage = open_storage(f"sqlite:///{tmp_path / 'm.db'}")
    updater = MemoryUpdater(llm_config(llm, llm_repair_attempts=0), storage)
    try:
        llm.reply("no json here")
        first = updater.update_memory(CHAT, thread_id="t1", user_id="u1")
        assert not first.ok and len(llm.requests) == 1
        # The queue's second run of the same update: not the request that failed.
        llm.reply("still no json")
        from memory_sql.intake import take_conversation
        from memory_sql.scope import Scope

        turns = take_conversation(CHAT).turns
        again = updater.update_from(turns, Scope.of(user_id="u1"), "t1", attempt=2)
        assert not again.ok
    finally:
        updater.close()
        storage.close()
    temperatures = [body["temperature"] for body in llm.requests]
    assert temperatures == [0.0, pytest.approx(REPAIR_TEMPERATURE_STEP)]


def test_an_llm_error_is_not_repaired(tmp_path, llm):
    storage = open_storage(f"sqlite:///{tmp_path / 'm.db'}")
    updater = MemoryUpdater(llm_config(llm, llm_max_retries=0), storage)
    try:
        llm.reply("overloaded", status=500)
        result = updater.update_memory(CHAT, thread_id="t1", user_id="u1")
    finally:
        updater.close()
        storage.close()
    assert not result.ok and "HTTP 500" in result.error and len(llm.requests) == 1


def test_rejections_are_logged_counted_and_reported(url, llm, caplog):
    tenant = f"t{uuid.uuid4().hex[:8]}"
    storage = open_storage(url)
    updater = MemoryUpdater(llm_config(llm), storage)
    caplog.set_level(logging.INFO, logger="memory_sql.update.updater")
    try:
        for name in ("placeholder content", "confidence 1.5", "the prompt's example"):
            llm.reply(FLAWED_REPLIES[name][0])
            updater.update_memory(CHAT, thread_id=name, user_id="u1", tenant_id=tenant)
        reply = update_reply(factsToRemove=["fact_000000000000"])
        reply["newFacts"].append(
            {"content": "Uses British spelling for this report", "confidence": 0.9, **LABELS}
        )
        llm.reply(json.dumps(reply))
        last = updater.update_memory(CHAT, thread_id="t-last", user_id="u2", tenant_id=tenant)
        with storage.engine.connect() as conn:
            rows = conn.execute(
                sa.select(llm_rejections_view).where(llm_rejections_view.c.tenant_id == tenant)
            ).all()
        report = build_report(storage.engine, tenant_id=tenant)
    finally:
        updater.close()
        storage.close()
    assert last.ok and last.rejected == {"unknown_id": 1, "one_off": 1}
    by_reason = {row.reason: (row.calls, row.items) for row in rows}
    assert by_reason == {
        "placeholder": (2, 2),
        "confidence_out_of_range": (1, 1),
        "unknown_id": (1, 1),
        "one_off": (1, 1),
    }
    assert report["totals"]["rejected_items"] == 5
    assert report["llm_rejections"][0] == {"reason": "placeholder", "calls": 2, "items": 2}
    lines = [r for r in caplog.records if "parts of the LLM's reply refused" in r.getMessage()]
    assert [r.levelname for r in lines] == ["INFO"] * 4
    assert "unknown_id ×1, one_off ×1" in lines[-1].getMessage() or (
        "one_off ×1, unknown_id ×1" in lines[-1].getMessage()
    )
