"""A way back for failed updates: list, retry and drop queue rows by key, from Python
(``memory_sql.queue.manage``, ``MemoryService``) and from ``memory-sql queue``, on SQLite and
PostgreSQL; and the warning of a service started with no model."""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa
from conftest import assert_no_checked_out_connections
from llm_server import LABELS, llm_config
from typer.testing import CliRunner

from memory_sql import MemoryConfig, MemoryService, UpdateKey, UpdateNotFoundError
from memory_sql.cli import app
from memory_sql.config import QueueSettings
from memory_sql.database import create_engine
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.models import utcnow
from memory_sql.queue import UpdateQueue
from memory_sql.queue.manage import drop_updates, list_updates, retry_updates
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.scope import Scope

CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}
runner = CliRunner(env={**CLEAN_ENV, "COLUMNS": "200"})
ALICE = Scope.of(user_id="alice", agent_name="coder")
BOB = Scope.of(user_id="bob")
CHAT = [Message("user", "I use vim"), Message("assistant", "Noted")]
UPDATE = json.dumps(
    {
        "user": {},
        "history": {},
        "newFacts": [
            {"content": "Uses vim", "category": "preference", "confidence": 0.9, **LABELS}
        ],
    }
)


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    url = request.getfixturevalue(f"{request.param}_url")
    engine = create_engine(url)
    with engine.begin() as conn:  # the PostgreSQL database is the session's: start empty
        conn.execute(sa.delete(pending))
    engine.dispose()
    return url


@pytest.fixture
def engine(url):
    engine = create_engine(url)
    yield engine
    assert_no_checked_out_connections(engine)
    engine.dispose()


def make_queue(engine) -> UpdateQueue:
    return UpdateQueue(
        engine, QueueSettings(debounce_seconds=30, max_attempts=1, retry_backoff_seconds=10)
    )


def failed(queue: UpdateQueue, scope: Scope, thread: str, *, kind: str = "flush") -> None:
    """A row of ``scope`` and ``thread`` that used its one attempt and failed."""
    queue.add(scope, thread, CHAT, Signals(), immediate=kind == "flush")
    if kind == "turn":
        queue.make_all_due()
    items = [i for i in queue.claim(10) if (i.scope, i.thread_id) == (scope, thread)]
    assert len(items) == 1
    assert queue.fail(items[0], "LLM call failed: boom") == "failed"


def row(engine, thread: str):
    with engine.connect() as conn:
        return conn.execute(sa.select(pending).where(pending.c.thread_id == thread)).one_or_none()


# keys -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts", "shown"),
    [
        ("default/alice", ("default", "alice", None, None, None), "default/alice"),
        ("default/alice/-", ("default", "alice", "", None, None), "default/alice/-"),
        ("acme/bob/Coder", ("acme", "bob", "coder", None, None), "acme/bob/coder"),
        (
            "flush:default/alice/coder/chat.jsonl:3",
            ("default", "alice", "coder", "chat.jsonl:3", "flush"),
            "flush:default/alice/coder/chat.jsonl:3",
        ),
        (
            "default/alice/-/a/b: c",
            ("default", "alice", "", "a/b: c", None),
            "default/alice/-/a/b: c",
        ),
        ("turn:default/u", ("default", "u", None, None, "turn"), "turn:default/u"),
    ],
)
def test_a_key_reads_one_way(text, parts, shown):
    key = UpdateKey.parse(text)
    assert (key.tenant_id, key.user_id, key.agent_name, key.thread_id, key.kind) == parts
    assert str(key) == shown
    assert UpdateKey.parse(str(key)) == key


@pytest.mark.parametrize("text", ["", "alice", "default/", "later:default/alice", "[red]x"])
def test_a_malformed_key_is_refused_with_the_syntax(text):
    with pytest.raises(ValueError, match=r"TENANT/USER\[/AGENT\[/THREAD\]\]"):
        UpdateKey.parse(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("default/a b", "invalid user_id 'a b'"), ("x/y/a_b", "invalid agent_name"), ("[/]", "[")],
)
def test_a_key_with_a_bad_name_is_refused_naming_it(text, problem):
    with pytest.raises(ValueError, match=rf"^update key {re.escape(repr(text))}: .*") as caught:
        UpdateKey.parse(text)
    assert problem in str(caught.value)


# list, retry, drop ------------------------------------------------------------------------------


def test_the_list_shows_failed_rows_first_with_their_keys(engine):
    queue = make_queue(engine)
    queue.add(BOB, "waiting", CHAT, Signals())
    failed(queue, ALICE, "t1")
    rows = list_updates(engine)
    assert [(r.key, r.status, r.attempts) for r in rows] == [
        ("flush:default/alice/coder/t1", "failed", 1),
        ("turn:default/bob/-/waiting", "pending", 0),
    ]
    assert rows[0].last_error == "LLM call failed: boom" and not rows[0].running
    assert [r.key for r in list_updates(engine, failed_only=True)] == [rows[0].key]
    assert [r.thread_id for r in list_updates(engine, user_id="bob")] == ["waiting"]
    assert [r.thread_id for r in list_updates(engine, agent_name="")] == ["waiting"]
    assert list_updates(engine, tenant_id="acme") == []
    data = rows[0].to_dict()
    assert data["key"] == rows[0].key and data["status"] == "failed" and data["due_at"]


def test_a_retry_resets_status_attempts_and_error_and_makes_the_row_due_now(engine):
    queue = make_queue(engine)
    failed(queue, ALICE, "t1")
    failed(queue, BOB, "t2")
    before = utcnow()
    change = retry_updates(engine)  # every failed row
    assert sorted(change.changed) == ["flush:default/alice/coder/t1", "flush:default/bob/-/t2"]
    assert change.running == ()
    for thread in ("t1", "t2"):
        again = row(engine, thread)
        assert (again.status, again.attempts, again.last_error) == ("pending", 0, None)
        assert before - timedelta(seconds=1) <= again.due_at <= utcnow()
        assert again.lease_owner is None
    assert {i.thread_id for i in queue.claim(10)} == {"t1", "t2"}


def test_retrying_a_key_makes_a_waiting_row_due_now_and_leaves_others(engine):
    queue = make_queue(engine)
    queue.add(ALICE, "t1", CHAT, Signals())  # due in 30 s
    failed(queue, BOB, "t2")
    assert retry_updates(engine, ["default/alice"]).changed == ("turn:default/alice/coder/t1",)
    assert row(engine, "t1").due_at <= utcnow()
    assert row(engine, "t2").status == "failed"
    # --all touches failed rows only
    queue.add(ALICE, "t3", CHAT, Signals())
    due = row(engine, "t3").due_at
    assert retry_updates(engine).changed == ("flush:default/bob/-/t2",)
    assert row(engine, "t3").due_at == due


def test_a_drop_deletes_the_rows_named(engine):
    queue = make_queue(engine)
    failed(queue, ALICE, "t1")
    failed(queue, BOB, "t2")
    queue.add(BOB, "t3", CHAT, Signals())
    assert drop_updates(engine, ["flush:default/alice/coder/t1"]).changed == (
        "flush:default/alice/coder/t1",
    )
    assert row(engine, "t1") is None
    assert drop_updates(engine).changed == ("flush:default/bob/-/t2",)  # every failed row
    assert [r.thread_id for r in list_updates(engine)] == ["t3"]
    # a kind narrows the key: t3 is a turn
    with pytest.raises(UpdateNotFoundError, match="flush:default/bob/-/t3"):
        drop_updates(engine, ["flush:default/bob/-/t3"])
    assert drop_updates(engine, ["turn:default/bob/-/t3"]).changed


def test_a_key_naming_nothing_changes_nothing(engine):
    queue = make_queue(engine)
    failed(queue, ALICE, "t1")
    with pytest.raises(UpdateNotFoundError, match="default/nobody"):
        retry_updates(engine, ["default/alice", "default/nobody"])
    assert row(engine, "t1").status == "failed"
    with pytest.raises(UpdateNotFoundError):
        drop_updates(engine, ["default/alice", "default/nobody"])
    assert row(engine, "t1") is not None


def test_a_row_a_worker_is_running_is_left_alone(engine):
    queue = make_queue(engine)
    queue.add(ALICE, "t1", CHAT, Signals(), immediate=True)
    (running,) = queue.claim(1)
    for change in (
        retry_updates(engine, ["default/alice"]),
        drop_updates(engine, ["default/alice"]),
    ):
        assert change.changed == () and change.running == ("flush:default/alice/coder/t1",)
    left = row(engine, "t1")
    assert left.lease_owner == queue.owner and left.attempts == 1
    assert list_updates(engine)[0].running
    assert queue.complete(running)


# the service --------------------------------------------------------------------------------------


def test_the_service_lists_retries_and_drops_failed_updates(url, llm):
    settings = llm_config(llm, storage=url, max_attempts=1, llm_max_retries=0)
    llm.reply("overloaded", status=500)
    with MemoryService(settings) as service:
        assert service.before_summarization(CHAT, thread_id="t1", user_id="alice")
        service.flush(timeout=10)
        (gone,) = service.pending_updates(failed_only=True)
        assert gone.key == "flush:default/alice/-/t1" and "500" in (gone.last_error or "")
        llm.reply(UPDATE)
        assert service.retry_failed().changed == (gone.key,)
        assert service.flush(timeout=10)
        assert service.pending_updates() == []
        doc = service.storage.load(user_id="alice")
        assert [f.content for f in doc.facts] == ["Uses vim"]
        llm.reply("overloaded", status=500)
        service.before_summarization(CHAT, thread_id="t2", user_id="alice")
        service.flush(timeout=10)
        assert service.drop_updates(["default/alice/-/t2"]).changed == ("flush:default/alice/-/t2",)
        assert service.status()["failed"] == 0


def test_a_service_started_with_no_model_says_which_settings_name_one(url, caplog, monkeypatch):
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    caplog.set_level(logging.WARNING, logger="memory_sql")
    with MemoryService(MemoryConfig(storage=url), start=False):
        pass
    assert "model" not in caplog.text  # nothing runs: nothing to say
    with MemoryService(MemoryConfig(storage=url)):
        pass
    (record,) = [r for r in caplog.records if "no memory LLM model" in r.getMessage()]
    assert record.levelno == logging.WARNING
    for name in ("model_name", "MEMORY_SQL_MODEL_NAME", "OPENAI_MODEL", "queue list", "wait"):
        assert name in record.getMessage()
    caplog.clear()
    with MemoryService(MemoryConfig(storage=url, model_name="some-model")):
        pass
    assert "no memory LLM model" not in caplog.text


# memory-sql queue ---------------------------------------------------------------------------------


def invoke(*args: str, code: int = 0, input: str | None = None) -> str:
    result = runner.invoke(app, list(args), input=input)
    assert "Traceback" not in result.output
    assert result.exit_code == code, result.output
    return result.output


def test_the_queue_commands(engine, url):
    queue = make_queue(engine)
    failed(queue, ALICE, "t1")
    failed(queue, BOB, "t2")
    queue.add(BOB, "t3", CHAT, Signals())

    listed = invoke("queue", "list", "--url", url)
    assert "1 update waiting, 2 failed" in listed
    assert "flush:default/alice/coder/t1" in listed and "LLM call failed: boom" in listed
    failed_only = json.loads(invoke("queue", "list", "--failed", "--json", "--url", url))
    assert [r["key"] for r in failed_only] == [
        "flush:default/alice/coder/t1",
        "flush:default/bob/-/t2",
    ]
    assert {r["status"] for r in failed_only} == {"failed"}

    retried = invoke("queue", "retry", "default/alice/coder/t1", "--url", url)
    assert "retried 1 update\n  flush:default/alice/coder/t1" in retried
    assert "no memory LLM model is configured" in retried  # the note: they would fail again
    assert row(engine, "t1").status == "pending"

    assert "Aborted" in invoke("queue", "drop", "--all", "--url", url, input="n\n", code=1)
    assert row(engine, "t2") is not None
    dropped = invoke("queue", "drop", "--all", "--yes", "--url", url)
    assert "dropped 1 update\n  flush:default/bob/-/t2" in dropped
    assert row(engine, "t2") is None
    assert "nothing retried" in invoke("queue", "retry", "--all", "--url", url)

    missing = invoke("queue", "retry", "default/nobody", "--url", url, code=1)
    assert missing == "error: no update in the queue matches default/nobody\n"
    for args in (["queue", "retry"], ["queue", "retry", "--all", "default/alice"]):
        assert "--all" in invoke(*args, "--url", url, code=2)
