"""The backend end to end: LangChain messages in through ``add``/``add_nowait``, the update
through the real scripted chat-completions server (or the host's chat model), the host's
callbacks around each LLM call, and a shutdown that keeps its timeout."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from deerflow.agents.memory.manager import MemoryCallbacks, default_host_hooks
from deerflow.models import ScriptedChatModel, create_chat_model, set_default_chat_model
from deerflow_gateway import check_document
from llm_server import update_reply

from memory_sql import LLMClient, LLMError, MemoryConfig, MemoryUpdater, open_storage
from memory_sql.integrations.deerflow.llm import HostChatModel, reply_text

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import langchain_core  # noqa: F401 - CI must fail, not skip, without the extra
else:
    pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

FACT = "Deploys with pnpm"


def learned(*contents: str) -> str:
    """A memory update adding ``contents`` as durable, user-level facts."""
    facts = [
        {
            "content": content,
            "category": "preference",
            "confidence": 0.95,
            "scope": "user",
            "durability": "durable",
            "authority": "descriptive",
        }
        for content in contents
    ]
    return json.dumps(update_reply(newFacts=facts))


def conversation(text: str = "We always deploy with pnpm, never npm.") -> list[Any]:
    return [
        HumanMessage(text, id="h1"),
        AIMessage("", tool_calls=[{"name": "shell", "args": {"cmd": "ls"}, "id": "c1"}]),
        ToolMessage("package.json", tool_call_id="c1"),
        AIMessage("Noted: pnpm it is.", id="a1"),
    ]


class RecordingCallbacks(MemoryCallbacks):
    """The host's callbacks, keeping what each call got; the pre-call hook adds metadata to
    the invoke config as a tracer would."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.fail = fail

    def on_memory_llm_call(self, invoke_config: dict[str, Any], **kwargs: Any) -> None:
        invoke_config.setdefault("metadata", {})["traced_by"] = "test"
        self.calls.append(kwargs)
        if self.fail:
            raise RuntimeError("tracer down")

    def on_memory_llm_result(self, invoke_config: dict[str, Any], **kwargs: Any) -> None:
        self.results.append({"invoke_config": dict(invoke_config), **kwargs})
        if self.fail:
            raise RuntimeError("tracer down")


def llm_settings(llm: Any, database: str, **extra: Any) -> dict[str, Any]:
    return {
        "url": database,
        "model": {"model": "test-model", "api_key": "sk-test", "base_url": llm.base_url},
        "llm_timeout_seconds": 5,
        "llm_max_retries": 0,
        "debounce_seconds": 60,
        "max_debounce_seconds": 600,
        "workers": 1,
        **extra,
    }


def hooks(callbacks: Any = None, factory: Callable[[], Any] | None = None) -> dict[str, Any]:
    out = default_host_hooks(host_llm_factory=factory)
    out["callbacks"] = callbacks
    return out


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def host_model() -> Any:
    model = ScriptedChatModel(model_name="host-default-model")
    set_default_chat_model(model)
    yield model
    set_default_chat_model(None)


def test_a_conversation_is_learned_through_the_llm_server_with_the_hosts_callbacks(
    make_manager: Any, llm: Any, own_database: str, user: str
) -> None:
    callbacks = RecordingCallbacks()
    manager = make_manager(llm_settings(llm, own_database), hooks=hooks(callbacks))
    llm.reply(learned(FACT))
    assert manager.add("t-1", conversation(), user_id=user, trace_id="trace-9") is None
    assert manager.status()["pending"] == 1 and llm.requests == []  # debounced

    started = time.monotonic()
    assert manager.shutdown_flush(10) is True
    assert time.monotonic() - started < 10
    assert len(llm.requests) == 1
    sent = json.dumps(llm.requests[0]["messages"])
    assert "deploy with pnpm" in sent and "package.json" not in sent  # the tool turn filtered
    document = manager.get_memory(user_id=user)
    check_document(document)
    (fact,) = document["facts"]
    assert (fact["content"], fact["source"]) == (FACT, "t-1")
    assert FACT in manager.get_context(user)

    (call,) = callbacks.calls
    assert call == {
        "thread_id": "t-1",
        "user_id": user,
        "trace_id": "trace-9",
        "model_name": "test-model",
    }
    (result,) = callbacks.results
    assert result["error"] is None and result["duration_ms"] >= 0
    assert result["model_name"] == "test-model"
    assert result["invoke_config"]["run_name"] == "memory_agent"
    assert json.loads(result["response"].text)["newFacts"][0]["content"] == FACT
    assert result["prompt"][0]["role"] == "system"


def test_add_nowait_is_due_at_once(
    make_manager: Any, llm: Any, own_database: str, user: str
) -> None:
    manager = make_manager(llm_settings(llm, own_database))
    llm.reply(learned("Summarised away but kept"))
    manager.add_nowait("t-2", conversation("Remember: I prefer short answers."), user_id=user)
    # no flush: the in-process worker runs it despite the 60 s debounce
    wait_for(lambda: manager.get_memory(user_id=user)["facts"] != [])
    assert manager.get_memory(user_id=user)["facts"][0]["source"] == "t-2"


def test_a_failing_callback_does_not_fail_the_update(
    make_manager: Any, llm: Any, own_database: str, user: str
) -> None:
    manager = make_manager(
        llm_settings(llm, own_database), hooks=hooks(RecordingCallbacks(fail=True))
    )
    llm.reply(learned(FACT))
    manager.add("t-3", conversation(), user_id=user)
    assert manager.shutdown_flush(10) is True
    assert [f["content"] for f in manager.get_memory(user_id=user)["facts"]] == [FACT]


def test_without_model_settings_the_hosts_chat_model_is_the_memory_llm(
    make_manager: Any, llm: Any, own_database: str, user: str, host_model: Any
) -> None:
    callbacks = RecordingCallbacks()
    # DeerFlow's blocks come as a list: the adapter joins their text
    host_model.reply([{"type": "text", "text": learned("Learned by the host's model")}])
    manager = make_manager(
        {"url": own_database, "debounce_seconds": 60, "workers": 1},
        hooks=hooks(callbacks, factory=create_chat_model),
    )
    manager.add("t-4", conversation(), user_id=user, agent_name="coder", trace_id="tr-4")
    assert manager.shutdown_flush(10) is True
    assert llm.requests == []  # the OpenAI-compatible client was not used
    (invoked,) = host_model.calls
    assert [m["role"] for m in invoked["input"]] == ["system", "user"]
    assert invoked["config"]["run_name"] == "memory_agent"
    assert invoked["config"]["metadata"] == {"traced_by": "test"}  # what the callback added
    facts = manager.get_memory(user_id=user, agent_name="coder")["facts"]
    assert [f["content"] for f in facts] == ["Learned by the host's model"]
    assert callbacks.calls[0]["model_name"] == "host-default-model"
    assert (callbacks.calls[0]["thread_id"], callbacks.calls[0]["trace_id"]) == ("t-4", "tr-4")
    assert callbacks.results[0]["response"].content[0]["type"] == "text"
    # the adapter's token counts reach the usage accounting
    usage = manager.status()
    assert usage["llm_calls"] == 1 and usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0


def test_model_settings_win_over_the_hosts_model(
    make_manager: Any, llm: Any, own_database: str, user: str, host_model: Any
) -> None:
    llm.reply(learned(FACT))
    manager = make_manager(llm_settings(llm, own_database), hooks=hooks(factory=create_chat_model))
    manager.add("t-5", conversation(), user_id=user)
    assert manager.shutdown_flush(10) is True
    assert host_model.calls == [] and len(llm.requests) == 1


def test_a_failing_host_model_fails_the_run_and_the_result_callback_sees_it(
    make_manager: Any, own_database: str, user: str, host_model: Any
) -> None:
    callbacks = RecordingCallbacks()
    host_model.reply(ConnectionError("provider unreachable"))
    manager = make_manager(
        {"url": own_database, "debounce_seconds": 60, "workers": 1, "retry_backoff_seconds": 60},
        hooks=hooks(callbacks, factory=create_chat_model),
    )
    manager.add("t-6", conversation(), user_id=user)
    assert manager.shutdown_flush(5) is False  # the run failed: left queued for its retry
    assert manager.get_memory(user_id=user)["facts"] == []
    assert manager.status()["failed_runs"] == 1 and manager.status()["pending"] == 1
    (result,) = callbacks.results
    assert isinstance(result["error"], LLMError) and "provider unreachable" in str(result["error"])
    assert result["response"] is None


def test_a_host_factory_without_a_model_falls_back_to_the_settings(
    make_manager: Any, own_database: str
) -> None:
    def broken() -> Any:
        raise RuntimeError("no models configured")

    for factory in (lambda: None, broken):
        manager = make_manager(
            {"url": own_database, "in_process_worker": False}, hooks=hooks(factory=factory)
        )
        assert isinstance(manager._service.updater.llm, LLMClient)


def test_the_adapter_gives_the_updater_text_and_token_counts(sqlite_url: str) -> None:
    model = ScriptedChatModel(model_name="gpt-host")
    model.reply(learned("Counted fact"))
    adapter = HostChatModel(model)
    storage = open_storage(sqlite_url)
    try:
        updater = MemoryUpdater(MemoryConfig(storage=sqlite_url), storage, llm=adapter)
        result = updater.update_memory(
            [{"role": "user", "content": "I like pnpm"}, {"role": "assistant", "content": "Ok"}],
            thread_id="t-7",
            user_id="counted",
        )
    finally:
        storage.close()
    assert result.ok and result.llm_called and result.facts_added
    assert result.prompt_tokens > 0 and result.completion_tokens > 0
    assert reply_text(
        [{"type": "reasoning", "text": "hm"}, "a", {"type": "text", "text": "b"}]
    ) == ("ab")
    model.reply("   ")
    with pytest.raises(LLMError, match="no text"):
        adapter.complete([{"role": "user", "content": "hi"}])
    with pytest.raises(TypeError):
        HostChatModel(object())


def test_a_real_langchain_chat_model_works_as_the_hosts_model(
    make_manager: Any, own_database: str, user: str
) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    model = GenericFakeChatModel(messages=iter([AIMessage(learned("From a LangChain model"))]))
    manager = make_manager(
        {"url": own_database, "debounce_seconds": 60, "workers": 1},
        hooks=hooks(RecordingCallbacks(), factory=lambda: model),
    )
    manager.add("t-8", conversation(), user_id=user)
    assert manager.shutdown_flush(10) is True
    assert [f["content"] for f in manager.get_memory(user_id=user)["facts"]] == [
        "From a LangChain model"
    ]


def test_shutdown_flush_keeps_its_timeout_while_an_update_hangs(
    make_manager: Any, llm: Any, own_database: str, user: str
) -> None:
    manager = make_manager(llm_settings(llm, own_database, llm_timeout_seconds=30))
    llm.reply(learned(FACT), delay=20)  # the LLM takes 20 s
    manager.add_nowait("t-9", conversation(), user_id=user)
    wait_for(lambda: len(llm.requests) == 1)  # in flight
    started = time.monotonic()
    assert manager.shutdown_flush(0.5) is False
    assert time.monotonic() - started < 1.5
    llm.close()  # the hung call ends (its connection closed): the run fails, stays queued
    started = time.monotonic()
    manager.close()
    assert time.monotonic() - started < 5


def test_with_the_worker_elsewhere_shutdown_only_hands_over_what_it_holds(
    make_manager: Any, own_database: str, user: str
) -> None:
    manager = make_manager({"url": own_database, "in_process_worker": False})
    manager.add("t-10", conversation(), user_id=user)
    started = time.monotonic()
    assert manager.shutdown_flush(5) is True
    assert time.monotonic() - started < 2
    engine = sa.create_engine(own_database)
    try:
        with engine.connect() as conn:
            waiting = conn.execute(
                sa.text("SELECT thread_id FROM memory_pending_updates WHERE user_id = :u"),
                {"u": user},
            ).scalars()
            assert list(waiting) == ["t-10"]  # for `memory-sql worker`
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_with_the_database_gone_the_agent_side_never_raises(
    make_manager: Any, new_pg_database: Any, user: str
) -> None:
    from memory_sql import migrations
    from memory_sql.database import create_engine

    url = new_pg_database()
    engine = create_engine(url)
    migrations.upgrade(engine)
    engine.dispose()
    text = url.render_as_string(hide_password=False)
    manager = make_manager({"url": text, "in_process_worker": False, "spool_retry_seconds": 60})
    manager.create_fact("Before the outage", user_id=user)
    assert "Before the outage" in manager.get_context(user)
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE "{url.database}" WITH (FORCE)'))
    admin.dispose()

    assert manager.get_context(user) == ""
    assert manager.add("t-11", conversation(), user_id=user) is None
    assert manager.add_nowait("t-11", conversation(), user_id=user) is None
    started = time.monotonic()
    assert manager.shutdown_flush(1.0) is False  # the spooled conversation cannot be written
    assert time.monotonic() - started < 2.5


def test_async_add_runs_off_the_event_loop(
    make_manager: Any, own_database: str, user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    manager = make_manager({"url": own_database, "in_process_worker": False})
    threads: list[str] = []
    real = manager._service.after_agent

    def spy(*args: Any, **kwargs: Any) -> bool:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(manager._service, "after_agent", spy)
    asyncio.run(manager.aadd("t-12", conversation(), user_id=user))
    assert threads and threads[0] != threading.main_thread().name
    assert manager.status()["pending"] >= 1
