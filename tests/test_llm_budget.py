"""A tenant's daily budget of memory-LLM calls and tokens: checked before the call, its
updates then wait (kept in the queue, the reason as their last error) while other tenants go
on; the service says so. Real SQLite files, the scripted LLM, a real ``memory-sql serve``."""

from __future__ import annotations

import re
import time

import pytest
import sqlalchemy as sa
from llm_server import llm_config
from server.conftest import service_settings_for
from server.service_process import ServiceProcess
from test_service import chat, learn

from memory_sql import MemoryService, migrations
from memory_sql.database import create_engine
from memory_sql.ops.reports import build_report
from memory_sql.schema import memory_llm_calls
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.server.keys import create_key


def test_a_tenant_over_its_daily_calls_waits_and_others_go_on(tmp_path, llm):
    llm.responder = learn
    config = llm_config(
        llm,
        storage=f"sqlite:///{tmp_path / 'm.db'}",
        debounce_seconds=0,
        workers=1,
        llm_daily_calls_per_tenant=2,
    )
    with MemoryService(config) as service:
        for n in range(4):
            assert service.after_agent(chat(f"tea{n}"), thread_id=f"t{n}", tenant_id="thrifty")
        assert service.flush(timeout=5) is False  # two can only run tomorrow
        assert service.after_agent(chat("coffee"), thread_id="c", tenant_id="other")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(llm.requests) < 3:
            time.sleep(0.1)
        with service.queue.engine.connect() as conn:
            waiting = conn.execute(
                sa.select(pending.c.tenant_id, pending.c.attempts, pending.c.last_error)
            ).all()
        status = service.status()
    assert len(llm.requests) == 3  # two of the thrifty tenant's, one of the other's
    assert [row.tenant_id for row in waiting] == ["thrifty", "thrifty"]
    assert all("llm_daily_calls_per_tenant 2" in row.last_error for row in waiting)
    assert all(row.attempts == 0 for row in waiting)  # waiting costs no attempt
    assert status["over_budget"] >= 2 and status["failed"] == 0


def test_the_service_says_when_a_tenant_is_over_its_budget(tmp_path, llm):
    llm.responder = learn
    url = f"sqlite:///{tmp_path / 'service.db'}"
    migrations.upgrade(url)
    engine = create_engine(url)
    key = create_key(engine, tenant_id="acme", role="write")[1]
    engine.dispose()
    settings = {**service_settings_for(llm), "storage": url, "llm_daily_calls_per_tenant": 1}
    with ServiceProcess(tmp_path, settings) as service, service.client(key) as http:
        for thread in ("t1", "t2"):
            body = {"user_id": "u1", "thread_id": thread, "messages": chat(thread)}
            assert http.post("/v1/conversations", json=body).status_code == 202
        deadline = time.monotonic() + 20
        rows: list = []
        while time.monotonic() < deadline and not any(r["last_error"] for r in rows):
            rows = http.get("/v1/queue").json()["updates"]
            time.sleep(0.2)
        answer = http.post(
            "/v1/conversations", json={"user_id": "u1", "thread_id": "t3", "messages": chat("x")}
        ).json()
        report = http.get("/v1/reports").json()
        metrics = http.get("/metrics").text
    assert len(llm.requests) == 1
    assert "daily memory-LLM budget" in rows[0]["last_error"]
    assert answer["queued"] is True and "llm_daily_calls_per_tenant 1" in answer["budget"]
    assert report["llm_budget"]["daily_calls"] == 1 and report["llm_budget"]["over"]
    held = re.search(r"^memory_sql_updates_over_budget_total (\S+)$", metrics, re.M)
    assert held is not None and float(held.group(1)) >= 1


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_the_updates_held_by_the_budget_show_in_the_usage_view_and_the_report(
    database, request, llm
):
    llm.responder = learn
    url = request.getfixturevalue("sqlite_url" if database == "sqlite" else "own_pg_url")
    config = llm_config(
        llm, storage=url, debounce_seconds=0, workers=1, llm_daily_calls_per_tenant=1
    )
    with MemoryService(config) as service:
        queue_thrifty_and_other(service)
        assert service.flush(timeout=5) is False  # two of the thrifty tenant's wait
        held_here = service.status()["over_budget"]
    engine = create_engine(url)
    try:
        report = build_report(engine, tenant_id="thrifty")
    finally:
        engine.dispose()
    rows = usage_view(url, "calls, held_over_budget")
    assert rows == [("other", 1, 0), ("thrifty", 1, held_here)]
    assert held_here >= 2  # each of the two waiting updates held at least once
    assert report["totals"]["held_over_budget"] == held_here
    assert report["llm_usage"][0]["held_over_budget"] == held_here


def queue_thrifty_and_other(service: MemoryService) -> None:
    """Three conversations of tenant "thrifty", then one of tenant "other"."""
    for n in range(3):
        assert service.after_agent(chat(f"tea{n}"), thread_id=f"t{n}", tenant_id="thrifty")
    assert service.after_agent(chat("coffee"), thread_id="c", tenant_id="other")


def usage_view(url: str, columns: str) -> list[tuple]:
    """``columns`` of ``memory_report_llm_usage``, after the tenant, a tuple per row."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = f"SELECT tenant_id, {columns} FROM memory_report_llm_usage ORDER BY tenant_id"
            return [tuple(row) for row in conn.execute(sa.text(query))]
    finally:
        engine.dispose()


NOTHING_LEARNED = '{"user": {}, "history": {}, "newFacts": [], "factsToRemove": []}'


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_tenant_over_its_daily_tokens_waits_and_others_go_on(database, request, llm):
    for _ in range(4):  # every call costs 600 + 400 tokens, whoever makes it
        llm.reply(NOTHING_LEARNED, prompt_tokens=600, completion_tokens=400)
    url = request.getfixturevalue("sqlite_url" if database == "sqlite" else "own_pg_url")
    config = llm_config(
        llm, storage=url, debounce_seconds=0, workers=1, llm_daily_tokens_per_tenant=1000
    )
    with MemoryService(config) as service:
        queue_thrifty_and_other(service)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            len(llm.requests) < 2 or service.status()["over_budget"] < 2
        ):
            time.sleep(0.1)
        time.sleep(0.5)  # time for a call the budget failed to stop
        status = service.status()
        with service.queue.engine.connect() as conn:
            waiting = conn.execute(
                sa.select(pending.c.tenant_id, pending.c.attempts, pending.c.last_error)
            ).all()
            spent = conn.execute(
                sa.select(
                    memory_llm_calls.c.tenant_id,
                    memory_llm_calls.c.prompt_tokens + memory_llm_calls.c.completion_tokens,
                ).order_by(memory_llm_calls.c.tenant_id)
            ).all()
    usage = usage_view(url, "calls, prompt_tokens + completion_tokens, held_over_budget")
    # One call of the thrifty tenant's used its 1 000 tokens; the other tenant's still ran.
    assert len(llm.requests) == 2
    assert [tuple(row) for row in spent] == [("other", 1000), ("thrifty", 1000)]
    assert [row.tenant_id for row in waiting] == ["thrifty", "thrifty"]  # kept, not lost
    assert all("llm_daily_tokens_per_tenant 1000" in row.last_error for row in waiting)
    assert all(row.attempts == 0 for row in waiting)  # waiting costs no attempt
    assert status["over_budget"] >= 2 and status["failed"] == 0
    assert usage == [
        ("other", 1, 1000, 0),
        ("thrifty", 1, 1000, status["over_budget"]),
    ]
