"""MemoryService end to end: real SQLite/PostgreSQL, the real openai client against a scripted
chat-completions server, APScheduler running the queue in background threads."""

from __future__ import annotations

import json
import logging
import re
import threading
import time

import pytest
import sqlalchemy as sa
from llm_server import LABELS, llm_config

from memory_sql import MemoryConfig
from memory_sql.database import create_engine
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.service import MemoryService

LIKES = re.compile(r"User: I like (\S+)")


def learn(body: dict) -> str:
    """The scripted LLM's answer: a fact for every "I like X" of the conversation."""
    prompt = body["messages"][-1]["content"]
    conversation = prompt.split("<conversation>")[1].split("</conversation>")[0]
    facts = [
        {"content": f"Likes {thing}", "category": "preference", "confidence": 0.9, **LABELS}
        for thing in LIKES.findall(conversation)
    ]
    return json.dumps({"user": {}, "history": {}, "newFacts": facts, "factsToRemove": []})


def chat(*likes: str, extra: str = "") -> list[dict]:
    messages = []
    for thing in likes:
        messages += [
            {"role": "user", "content": f"I like {thing}{extra}"},
            {"role": "assistant", "content": f"Noted: {thing}."},
        ]
    return messages


def conversations_seen(llm) -> list[str]:
    return [
        body["messages"][-1]["content"].split("<conversation>")[1].split("</conversation>")[0]
        for body in llm.requests
    ]


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    url = request.getfixturevalue(f"{request.param}_url")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    engine.dispose()
    return url


@pytest.fixture
def make_service(db_url, llm):
    made: list[MemoryService] = []

    def make(**settings) -> MemoryService:
        llm.responder = learn
        defaults = {"storage": db_url, "debounce_seconds": 0.3, "sweep_interval_seconds": 30}
        service = MemoryService(llm_config(llm, **(defaults | settings)))
        made.append(service)
        return service

    yield make
    for service in made:
        service.close(timeout=10)


def wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def facts_of(service: MemoryService, user: str, agent: str | None = "coder") -> list[str]:
    return sorted(f.content for f in service.storage.load(user_id=user, agent_name=agent).facts)


def test_five_conversations_in_the_window_make_one_llm_call(make_service, llm, scope):
    service = make_service(debounce_seconds=1.5, max_debounce_seconds=30)
    user = scope["user_id"]
    for n, thing in enumerate(["tea", "coffee", "juice", "water", "milk"]):
        extra = ". No, that's wrong" if n == 1 else ""
        assert service.after_agent(
            chat(thing, extra=extra), thread_id="t1", user_id=user, agent_name="coder"
        )
    assert service.status()["pending"] == 1
    assert wait_for(lambda: service.status()["pending"] == 0)
    assert len(llm.requests) == 1
    (seen,) = conversations_seen(llm)
    assert "milk" in seen and "tea" not in seen
    assert "<mode>correction</mode>" in llm.requests[0]["messages"][-1]["content"]
    assert facts_of(service, user) == ["Likes milk"]
    block = service.memory_context(user_id=user, agent_name="coder")
    assert "<user_memory>" in block and "Likes milk" in block and "<current_date>" in block


def test_two_keys_never_wait_on_each_other(make_service, llm, scope):
    # The busy thread's traffic comes every 0.1 s, far inside its 1 s debounce even when the
    # machine is loaded (the suite runs in several processes).
    service = make_service(debounce_seconds=1.0, max_debounce_seconds=60)
    user = scope["user_id"]
    service.after_agent(chat("quiet"), thread_id="quiet", user_id=user, agent_name="coder")
    started = time.monotonic()
    done_at = None
    while time.monotonic() - started < 4.0:
        service.after_agent(chat("busy"), thread_id="busy", user_id=user, agent_name="coder")
        if done_at is None and "Likes quiet" in facts_of(service, user):
            done_at = time.monotonic() - started
        time.sleep(0.1)
    assert done_at is not None and done_at < 3.0, done_at
    assert "Likes busy" not in facts_of(service, user)  # still debounced by its own traffic


def test_a_busy_key_is_still_updated_by_the_maximum_wait(make_service, llm, scope):
    import openai  # noqa: F401  (imported here, its first import is not timed: seconds when loaded)

    service = make_service(debounce_seconds=1.5, max_debounce_seconds=3.0)
    user = scope["user_id"]
    started = time.monotonic()
    first_update = None
    n = 0
    while time.monotonic() - started < 6.0:
        service.after_agent(chat(f"drink{n}"), thread_id="t", user_id=user, agent_name="coder")
        n += 1
        if first_update is None and llm.requests:
            first_update = time.monotonic() - started
        time.sleep(0.3)
    assert first_update is not None  # without the maximum wait: never, turns come every 0.3 s
    assert 2.7 <= first_update <= 5.5, first_update


def test_a_conversation_arriving_during_its_update_runs_next(make_service, llm, scope):
    service = make_service(debounce_seconds=0.0)
    user = scope["user_id"]
    release = threading.Event()
    entered = threading.Event()

    def slow_then_learn(body: dict) -> str:
        if not entered.is_set():
            entered.set()
            release.wait(10)
        return learn(body)

    llm.responder = slow_then_learn
    service.after_agent(chat("tea"), thread_id="t1", user_id=user, agent_name="coder")
    assert entered.wait(10)
    service.after_agent(chat("tea", "cake"), thread_id="t1", user_id=user, agent_name="coder")
    release.set()
    assert service.flush(timeout=10)
    assert len(llm.requests) == 2
    assert "cake" in conversations_seen(llm)[1]
    assert facts_of(service, user) == ["Likes cake", "Likes tea"]


def test_flush_runs_everything_pending_now(make_service, llm, scope):
    service = make_service(debounce_seconds=60, max_debounce_seconds=600)
    user = scope["user_id"]
    for n in range(5):
        service.after_agent(chat(f"x{n}"), thread_id=f"t{n}", user_id=user, agent_name="coder")
    assert service.status()["pending"] == 5
    assert service.flush(timeout=15)
    assert service.status()["pending"] == 0
    assert facts_of(service, user) == [f"Likes x{n}" for n in range(5)]


def test_before_summarization_is_due_at_once(make_service, llm, scope):
    service = make_service(debounce_seconds=60, max_debounce_seconds=600)
    user = scope["user_id"]
    service.after_agent(chat("later"), thread_id="t1", user_id=user, agent_name="coder")
    assert service.before_summarization(
        chat("now"), thread_id="t1", user_id=user, agent_name="coder"
    )
    assert wait_for(lambda: facts_of(service, user) == ["Likes now"])
    # The fact is saved a moment before the flush's row is deleted; the turn's row stays.
    assert wait_for(lambda: service.status()["pending"] == 1)
    assert facts_of(service, user) == ["Likes now"]


@pytest.mark.parametrize(
    "messages",
    [
        None,
        42,
        "just a string",
        [{"role": "wizard", "content": "hi"}],
        [{"role": "user", "content": {"nested": "dict"}}],
        [object()],
    ],
    ids=["none", "int", "string", "bad-role", "bad-content", "object"],
)
def test_after_agent_with_garbage_returns_normally_and_logs(make_service, scope, caplog, messages):
    service = make_service()
    with caplog.at_level(logging.WARNING, logger="memory_sql.service"):
        assert service.after_agent(messages, thread_id="t1", **scope) is False
    assert service.status()["problems"] == 1
    assert "cannot queue thread 't1'" in caplog.text
    assert service.status()["pending"] == 0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"thread_id": "t1", "user_id": "../etc"}, "user_id"),
        ({"thread_id": "", "user_id": "u"}, "thread_id"),
        ({"thread_id": "t1", "user_id": "u", "agent_name": "bad name"}, "agent_name"),
    ],
)
def test_after_agent_with_bad_names_logs_the_field(make_service, caplog, args, field):
    service = make_service()
    with caplog.at_level(logging.WARNING, logger="memory_sql.service"):
        assert service.after_agent(chat("tea"), **args) is False
    assert f"invalid {field}" in caplog.text


def test_too_little_dialogue_is_not_queued(make_service, scope):
    service = make_service()
    assert (
        service.after_agent([{"role": "user", "content": "hi"}], thread_id="t1", **scope) is False
    )
    assert (
        service.after_agent(
            chat("ok")[:1] + [{"role": "assistant", "content": "ok"}], thread_id="t2", **scope
        )
        is True
    )
    assert service.status() | {"problems": 0} == service.status()


def test_text_that_is_not_valid_unicode_is_refused_at_the_door(make_service, scope, caplog):
    service = make_service()
    lone_surrogate = [
        {"role": "user", "content": "I like tea \ud800"},
        {"role": "assistant", "content": "Noted."},
    ]
    with caplog.at_level(logging.WARNING, logger="memory_sql.service"):
        assert service.after_agent(lone_surrogate, thread_id="t1", **scope) is False
    assert "not valid Unicode" in caplog.text
    status = service.status()
    assert status["problems"] == 1 and status["pending"] == 0 and status["spooled"] == 0
    assert service.after_agent(chat("coffee"), thread_id="t1", **scope) is True


def test_the_llm_down_leaves_the_conversation_queued_with_its_error(db_url, scope, caplog):
    config = llm_config_unreachable(db_url)
    service = MemoryService(config)
    try:
        with caplog.at_level(logging.WARNING):
            assert service.after_agent(chat("tea"), thread_id="t1", **scope)
            assert wait_for(lambda: service.status()["failed_runs"] >= 1)
        assert service.status()["pending"] == 1
        engine = create_engine(db_url)
        with engine.connect() as conn:
            error = conn.execute(sa.select(pending.c.last_error)).scalar()
        engine.dispose()
        assert "127.0.0.1:9" in error or "connect" in error.lower()
        assert service.memory_context(**scope) == ""
        # One failed attempt, one warning (the worker's, with the attempt), not one per layer.
        told = [r for r in caplog.records if r.levelno >= logging.WARNING and "failed" in r.message]
        assert len(told) == 1, [r.message for r in told]
        assert "attempt 1" in told[0].message
    finally:
        service.close(timeout=5)


def llm_config_unreachable(db_url: str) -> MemoryConfig:
    return MemoryConfig(
        storage=db_url,
        model_name="test-model",
        llm_base_url="http://127.0.0.1:9/v1",
        llm_api_key="sk-test",
        llm_timeout_seconds=1,
        llm_max_retries=0,
        debounce_seconds=0,
        retry_backoff_seconds=60,
    )


def test_disabled_memory_does_nothing(make_service, llm, scope):
    service = make_service(enabled=False)
    assert service.after_agent(chat("tea"), thread_id="t1", **scope) is False
    assert service.memory_context(**scope) == ""
    assert service.status()["pending"] == 0


def test_close_leaves_pending_work_for_the_next_start(db_url, llm, scope):
    llm.responder = learn
    config = llm_config(llm, storage=db_url, debounce_seconds=60, max_debounce_seconds=600)
    first = MemoryService(config)
    first.after_agent(chat("tea"), thread_id="t1", **scope)
    assert first.close(timeout=5)
    assert llm.requests == []
    second = MemoryService(config)
    try:
        assert second.status()["pending"] == 1
        assert second.flush(timeout=10)
        assert facts_of(second, scope["user_id"]) == ["Likes tea"]
    finally:
        second.close()


@pytest.mark.postgres
def test_the_database_going_away_never_reaches_the_agent(new_pg_database, llm, scope, caplog):
    from memory_sql import migrations

    url = new_pg_database()
    engine = create_engine(url)
    migrations.upgrade(engine)
    engine.dispose()
    llm.responder = learn
    service = MemoryService(llm_config(llm, storage=url.render_as_string(hide_password=False)))
    try:
        admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{url.database}" WITH (FORCE)'))
        admin.dispose()
        with caplog.at_level(logging.WARNING, logger="memory_sql"):
            # Kept in the process for when the database answers; this one never will.
            assert service.after_agent(chat("tea"), thread_id="t1", **scope) is True
            assert len(service.spool) == 1
            assert service.memory_context(**scope) == ""
            assert "database unavailable" in caplog.text
            assert "cannot read the memory" in caplog.text
            service.close(timeout=5)
        assert "1 conversation(s) stay in" in caplog.text  # on disk, not dropped
    finally:
        service.close(timeout=5)


def test_the_seed_storage_use_form_builds_that_class(tmp_path, llm, scope):
    from memory_sql.storage import FileStorage

    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "memory:\n"
        "  storage:\n"
        "    use: memory_sql.storage.file.FileStorage\n"
        f"    path: {tmp_path / 'files'}\n"
        "  debounce_seconds: 0\n"
        "  model_name: test-model\n"
        f"  llm_base_url: {llm.base_url}\n"
        "  llm_api_key: sk-test\n"
    )
    llm.responder = learn
    with MemoryService(MemoryConfig.from_yaml(config_file, env={})) as service:
        assert isinstance(service.storage, FileStorage)
        assert service.storage.root == tmp_path / "files"
        assert service.after_agent(chat("tea"), thread_id="t1", **scope)
        assert service.flush(timeout=10)
        assert facts_of(service, scope["user_id"]) == ["Likes tea"]
    assert (tmp_path / "files" / "queue.db").is_file()


def test_a_run_longer_than_its_lease_is_not_run_twice(make_service, llm, scope):
    # renewed every 0.5 s: a loaded machine may delay a renewal by up to a second
    service = make_service(debounce_seconds=0, lease_seconds=1.5, workers=2)

    def slow_learn(body: dict) -> str:
        time.sleep(4.5)  # three leases long: renewals must keep the row ours
        return learn(body)

    llm.responder = slow_learn
    service.after_agent(chat("tea"), thread_id="t1", **scope)
    assert service.flush(timeout=15)
    assert len(llm.requests) == 1
    assert facts_of(service, scope["user_id"]) == ["Likes tea"]


def test_close_during_a_run_does_not_fail_it(db_url, llm, scope):
    started = threading.Event()

    def slow_learn(body: dict) -> str:
        started.set()
        time.sleep(1.5)
        return learn(body)

    llm.responder = slow_learn
    config = llm_config(llm, storage=db_url, debounce_seconds=0)
    service = MemoryService(config)
    service.after_agent(chat("tea"), thread_id="t1", **scope)
    assert started.wait(10)
    assert service.close(timeout=0.2) is False  # still running: it finishes alone
    assert wait_for(lambda: service.worker.in_flight == 0, timeout=10)
    with MemoryService(config, start=False) as reader:
        assert reader.status()["pending"] == 0
        assert facts_of(reader, scope["user_id"]) == ["Likes tea"]


def test_a_long_flush_is_learned_from_whole_part_by_part(make_service, llm, scope):
    service = make_service(debounce_seconds=60)
    things = [f"thing{n}" for n in range(60)]
    long_chat = []
    for thing in things:
        long_chat += [
            {"role": "user", "content": f"I like {thing} " + "x" * 1500},
            {"role": "assistant", "content": "Noted."},
        ]
    assert service.before_summarization(long_chat, thread_id="t1", **scope)
    assert service.flush(timeout=20)
    prompts = [body["messages"][-1]["content"] for body in llm.requests]
    assert len(prompts) >= 3
    assert not any("earlier messages omitted" in prompt for prompt in prompts)
    assert facts_of(service, scope["user_id"]) == sorted(f"Likes {t}" for t in things)


def test_status_counts_the_reply_parts_refused(make_service, llm, scope):
    from llm_server import LABELS, update_reply

    reply = update_reply()
    reply["newFacts"] += [
        {"content": "...", "confidence": 0.9, **LABELS},
        {"content": "Likes tea", "confidence": 7, **LABELS},
    ]
    llm.reply(json.dumps(reply))
    service = make_service(debounce_seconds=0)
    assert service.status()["rejected_items"] == 0 and service.rejections() == {}
    assert service.after_agent(chat("tea"), thread_id="t1", user_id=scope["user_id"])
    assert wait_for(lambda: service.status()["rejected_items"] == 2)
    assert service.rejections() == {"placeholder": 1, "confidence_out_of_range": 1}
    assert facts_of(service, scope["user_id"], None) == ["Prefers Python"]
