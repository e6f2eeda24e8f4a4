"""Usage accounting: every memory-LLM call of an update is a row of ``memory_llm_calls``
(tokens, latency, model, outcome), written with the save when there is one; the view
``memory_report_llm_usage`` and ``memory-sql report`` show it per tenant, UTC day and model."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from llm_server import llm_config, update_reply
from typer.testing import CliRunner

from memory_sql.cli import app
from memory_sql.ops.reports import build_report, llm_usage_view
from memory_sql.schema import memory_llm_calls
from memory_sql.scope import Scope
from memory_sql.storage import SQLStorage, open_storage
from memory_sql.update.updater import MemoryUpdater

CHAT = [
    {"role": "user", "content": "I am a backend engineer and I prefer Python."},
    {"role": "assistant", "content": "Noted."},
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def _rows(storage: SQLStorage, tenant: str) -> list:
    with storage.engine.connect() as conn:
        return conn.execute(
            sa.select(memory_llm_calls)
            .where(memory_llm_calls.c.tenant_id == tenant)
            .order_by(memory_llm_calls.c.called_at)
        ).all()


def _view(storage: SQLStorage, tenant: str) -> list:
    with storage.engine.connect() as conn:
        return conn.execute(
            sa.select(llm_usage_view).where(llm_usage_view.c.tenant_id == tenant)
        ).all()


def test_the_view_equals_the_servers_recorded_usage(url, llm):
    tenant = f"t{uuid.uuid4().hex[:8]}"
    other = f"o{uuid.uuid4().hex[:8]}"
    storage = open_storage(url)
    updater = MemoryUpdater(llm_config(llm, llm_max_retries=0, llm_repair_attempts=0), storage)
    try:
        llm.reply(json.dumps(update_reply()), prompt_tokens=1200, completion_tokens=80)
        llm.reply(json.dumps(update_reply()), prompt_tokens=1300, completion_tokens=60)
        llm.reply("not json at all", prompt_tokens=1100, completion_tokens=5)  # invalid reply
        llm.reply("overloaded", status=500)  # no answer, no tokens
        for n in range(4):
            updater.update_memory(CHAT, thread_id=f"th{n}", user_id=f"u{n % 2}", tenant_id=tenant)
        llm.reply(json.dumps(update_reply()), prompt_tokens=999, completion_tokens=9)
        updater.update_memory(CHAT, thread_id="x", user_id="u", tenant_id=other)

        served = llm.usage[:3]
        [row] = _view(storage, tenant)
        assert row.model == "test-model"
        assert row.calls == 4
        assert row.prompt_tokens == sum(p for _, p, _ in served) == 3600
        assert row.completion_tokens == sum(c for _, _, c in served) == 145
        assert row.failures == 2
        assert row.day == datetime.now(timezone.utc).date()
        assert row.p50_latency_ms is not None and row.p50_latency_ms >= 0
        [row] = _view(storage, other)
        assert (row.calls, row.prompt_tokens, row.completion_tokens) == (1, 999, 9)

        outcomes = [(r.outcome, r.prompt_tokens, r.tokens_counted) for r in _rows(storage, tenant)]
        assert outcomes == [
            ("ok", 1200, False),
            ("ok", 1300, False),
            ("invalid_reply", 1100, False),
            ("llm_error", 0, False),
        ]
        errors = [r.error for r in _rows(storage, tenant)]
        assert errors[:2] == [None, None] and "HTTP 500" in errors[3]

        report = build_report(storage.engine, tenant_id=tenant)
        assert report["llm_usage"] == [
            {
                "day": row.day.isoformat(),
                "model": "test-model",
                "calls": 4,
                "prompt_tokens": 3600,
                "completion_tokens": 145,
                "failures": 2,
                "p50_latency_ms": report["llm_usage"][0]["p50_latency_ms"],
                "held_over_budget": 0,
                # the staleness review's counts (revision 0015): nothing was stale
                "stale_offered": 0,
                "stale_removed": 0,
                "stale_extended": 0,
                "facts_merged": 0,
            }
        ]
        assert report["totals"]["llm_calls"] == 4
        assert report["totals"]["prompt_tokens"] == 3600
        shown = CliRunner().invoke(app, ["report", "--tenant", tenant, "--url", url])
        assert shown.exit_code == 0, shown.output
        assert "Memory LLM usage" in shown.output and "3,600" in shown.output
    finally:
        updater.close()
        storage.close()


def test_the_usage_row_commits_with_the_save_and_with_the_callers_writes(url, llm):
    tenant = f"t{uuid.uuid4().hex[:8]}"
    storage = open_storage(url)
    updater = MemoryUpdater(llm_config(llm), storage)
    seen: list[int] = []

    def also(connection) -> None:
        # The usage row is already written on this connection, inside the save.
        count = connection.execute(
            sa.select(sa.func.count())
            .select_from(memory_llm_calls)
            .where(memory_llm_calls.c.tenant_id == tenant)
        ).scalar_one()
        seen.append(count)

    try:
        llm.reply(json.dumps(update_reply()), prompt_tokens=500, completion_tokens=50)
        scope = Scope.of(user_id="u1", tenant_id=tenant)
        from memory_sql.intake.filter import filter_messages_for_memory

        result = updater.update_from(
            filter_messages_for_memory(CHAT), scope, "th", in_transaction=also
        )
        assert result.ok and result.changed
        assert seen == [1]
        assert len(_rows(storage, tenant)) == 1

        # A caller's write that fails rolls the save back, and the call is still counted.
        def fails(connection) -> None:
            raise RuntimeError("lease lost")

        llm.reply(
            json.dumps(update_reply(newFacts=[{**update_reply()["newFacts"][0], "content": "Z"}])),
            prompt_tokens=700,
            completion_tokens=70,
        )
        with pytest.raises(RuntimeError):
            updater.update_from(filter_messages_for_memory(CHAT), scope, "th", in_transaction=fails)
        rows = _rows(storage, tenant)
        assert [(r.outcome, r.prompt_tokens) for r in rows] == [("ok", 500), ("save_failed", 700)]
        assert storage.load(user_id="u1", tenant_id=tenant).version == result.version
    finally:
        updater.close()
        storage.close()


def test_tokens_are_counted_when_the_endpoint_reports_none(sqlite_url, llm):
    storage = open_storage(sqlite_url)
    updater = MemoryUpdater(llm_config(llm), storage)
    try:
        llm.reply(json.dumps(update_reply()), prompt_tokens=0, completion_tokens=0)
        result = updater.update_memory(CHAT, thread_id="th", user_id="u1")
        [row] = _rows(storage, "default")
        assert row.tokens_counted is True
        assert row.prompt_tokens > 100 and row.completion_tokens > 10
        assert (result.prompt_tokens, result.completion_tokens) == (
            row.prompt_tokens,
            row.completion_tokens,
        )
    finally:
        updater.close()
        storage.close()


@pytest.mark.parametrize(
    ("latencies", "median"), [([40, 10, 30, 20], 25.0), ([5, 1, 9], 5.0), ([7], 7.0)]
)
def test_the_median_latency_is_the_same_on_both_databases(url, latencies, median):
    tenant = f"m{uuid.uuid4().hex[:8]}"
    storage = open_storage(url)
    try:
        with storage.engine.begin() as conn:
            for n, latency in enumerate(latencies):
                conn.execute(
                    memory_llm_calls.insert().values(
                        tenant_id=tenant,
                        user_id="u",
                        agent_name="",
                        call_id=f"c{n}",
                        thread_id="t",
                        model="m",
                        called_at=datetime(2026, 11, 30, 23, 59, tzinfo=timezone.utc),
                        prompt_tokens=1,
                        completion_tokens=1,
                        tokens_counted=False,
                        latency_ms=latency,
                        outcome="ok",
                        error=None,
                    )
                )
        [row] = _view(storage, tenant)
        assert row.p50_latency_ms == median
        assert row.calls == len(latencies) and row.failures == 0
        assert row.day.isoformat() == "2026-11-30"
    finally:
        storage.close()


def test_file_storage_keeps_no_usage_and_still_updates(tmp_path, llm):
    storage = open_storage(str(tmp_path / "files"))
    updater = MemoryUpdater(llm_config(llm), storage)
    try:
        llm.reply(json.dumps(update_reply()))
        assert updater.update_memory(CHAT, thread_id="th", user_id="u1").changed
    finally:
        updater.close()
        storage.close()


def test_the_services_metrics_are_the_usage_rows(sqlite_url, llm):
    from memory_sql import MemoryService

    llm.responder = lambda body: json.dumps(update_reply())
    service = MemoryService(
        llm_config(llm, storage=sqlite_url, debounce_seconds=0, sweep_interval_seconds=30)
    )
    try:
        for n in range(3):
            service.after_agent(CHAT, thread_id=f"th{n}", user_id=f"u{n}")
        assert service.flush(timeout=20)
        status = service.status()
    finally:
        service.close(timeout=10)
    storage = open_storage(sqlite_url)
    try:
        rows = _rows(storage, "default")
    finally:
        storage.close()
    assert status["llm_calls"] == len(rows) == 3
    assert status["prompt_tokens"] == sum(r.prompt_tokens for r in rows) > 0
    assert status["completion_tokens"] == sum(r.completion_tokens for r in rows) > 0
    assert [r.outcome for r in rows] == ["ok"] * 3
