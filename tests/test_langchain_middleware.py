"""The LangChain v1 middleware with real ``create_agent`` agents, a recording fake chat model
from langchain_core, and a real MemoryService on a SQLite file whose LLM is the scripted
chat-completions server. Skipped without ``langchain`` installed, except under CI=true."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import pytest

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import langchain  # noqa: F401 - CI must fail, not skip, without the extra
else:
    pytest.importorskip("langchain")

import sqlalchemy as sa
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from llm_server import LABELS, llm_config, update_reply
from pydantic import Field

from memory_sql.integrations.langchain import (
    STATE_KEY,
    MemoryContextMiddleware,
    MemoryMiddleware,
    MemorySummarizationMiddleware,
    before_summarization_hook,
)
from memory_sql.models import Fact
from memory_sql.service import MemoryService
from memory_sql.storage import open_storage

AGENT = "coder"
BASE_PROMPT = "You are a coding agent."
FACT = "Deploys with pnpm"


class RecordingChatModel(GenericFakeChatModel):
    """langchain_core's fake chat model, keeping every list of messages it was called with."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.received.append(list(messages))
        return super()._generate(messages, *args, **kwargs)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingChatModel:
        return self  # the scripted replies decide which tools are called

    def system_prompt(self, call: int = -1) -> str:
        first = self.received[call][0]
        assert isinstance(first, SystemMessage), first
        return first.text


def _model() -> RecordingChatModel:
    return RecordingChatModel(messages=itertools.repeat("Noted."))


def _config(thread_id: str | None, user_id: str, **extra: str) -> dict[str, Any]:
    configurable = {"user_id": user_id, **extra}
    if thread_id is not None:
        configurable["thread_id"] = thread_id
    return {"configurable": configurable}


def _say(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def _spy(monkeypatch: pytest.MonkeyPatch, service: Any, name: str) -> list[dict[str, Any]]:
    """Record the calls of ``service.name`` (the real method still runs)."""
    calls: list[dict[str, Any]] = []
    real = getattr(service, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append({"args": args, **kwargs})
        return real(*args, **kwargs)

    monkeypatch.setattr(service, name, wrapper)
    return calls


def _texts(messages: Any) -> list[str]:
    return [m.text if isinstance(m, BaseMessage) else str(m.get("content")) for m in messages]


@pytest.fixture
def user_id(scope: dict[str, str]) -> str:
    return scope["user_id"]


@pytest.fixture
def service(llm: Any, sqlite_url: str) -> Iterator[MemoryService]:
    """A real service; a 60 s debounce keeps queued conversations pending until ``flush``."""
    llm.reply(json.dumps(update_reply(newFacts=[{"content": FACT, "confidence": 0.95, **LABELS}])))
    svc = MemoryService(llm_config(llm, storage=sqlite_url, debounce_seconds=60))
    yield svc
    svc.close(timeout=10)


def _agent(model: RecordingChatModel, service: Any, *extra: Any, **kwargs: Any) -> Any:
    middleware = [
        *extra,
        MemoryContextMiddleware(service, agent_name=AGENT),
        MemoryMiddleware(service, agent_name=AGENT),
    ]
    kwargs.setdefault("checkpointer", InMemorySaver())
    return create_agent(model, [], system_prompt=BASE_PROMPT, middleware=middleware, **kwargs)


def _add_fact(sqlite_url: str, user_id: str, content: str) -> None:
    with open_storage(sqlite_url) as store:
        doc = store.load(user_id=user_id, agent_name=AGENT)
        doc.facts.append(Fact(content=content, category="preference", confidence=0.99))
        store.save(doc, user_id=user_id, agent_name=AGENT)


def test_a_run_queues_the_conversation_and_the_next_thread_sees_the_memory(
    service: MemoryService, llm: Any, sqlite_url: str, user_id: str
) -> None:
    model = _model()
    agent = _agent(model, service)
    before = datetime.now().astimezone().date()

    agent.invoke(_say("We always deploy with pnpm, never npm."), _config("t1", user_id))

    # An empty memory: the first model call gets the base prompt and the date, no memory.
    assert model.system_prompt().startswith(BASE_PROMPT + "\n\n<system-reminder>")
    assert "<user_memory>" not in model.system_prompt()
    assert service.status()["pending"] == 1
    assert llm.requests == []  # debounced: nothing sent to the LLM yet

    assert service.flush(timeout=30)
    assert service.status()["pending"] == 0
    assert len(llm.requests) == 1
    assert "deploy with pnpm" in json.dumps(llm.requests[0]["messages"])
    with open_storage(sqlite_url) as store:
        doc = store.load(user_id=user_id, agent_name=AGENT)
    assert [f.content for f in doc.facts] == [FACT]

    agent.invoke(_say("Set up the project."), _config("t2", user_id))
    after = datetime.now().astimezone().date()
    prompt = model.system_prompt()
    assert prompt.startswith(BASE_PROMPT + "\n\n<system-reminder>\n<current_date>")
    assert any(f"<current_date>{d.isoformat()}, " in prompt for d in (before, after))
    assert "<user_memory>" in prompt and FACT in prompt
    assert prompt.endswith("</user_memory>")


def test_the_memory_is_read_once_per_thread_and_frozen_there(
    service: MemoryService, sqlite_url: str, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_fact(sqlite_url, user_id, "Prefers tabs")
    reads = _spy(monkeypatch, service, "memory_context")
    model = _model()
    agent = _agent(model, service)

    agent.invoke(_say("Hello."), _config("a", user_id))
    first = model.system_prompt()
    assert "Prefers tabs" in first
    assert len(reads) == 1
    assert reads[0]["user_id"] == user_id and reads[0]["agent_name"] == AGENT

    _add_fact(sqlite_url, user_id, "Prefers spaces after all")

    agent.invoke(_say("And again."), _config("a", user_id))
    assert model.system_prompt() == first  # the same block: not read again
    assert len(reads) == 1
    # the block sits in the thread's state, not among its messages
    state = agent.get_state(_config("a", user_id)).values
    assert "Prefers tabs" in state[STATE_KEY]
    assert all("<user_memory>" not in text for text in _texts(state["messages"]))

    agent.invoke(_say("New thread."), _config("b", user_id))
    assert "Prefers spaces after all" in model.system_prompt()
    assert len(reads) == 2


def test_every_model_call_of_a_run_gets_the_block(
    service: MemoryService, sqlite_url: str, user_id: str
) -> None:
    from langchain_core.tools import tool

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"result for {query}"

    _add_fact(sqlite_url, user_id, "Prefers tabs")
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": "x"}, "id": "c1"}])
    model = RecordingChatModel(messages=iter([call, AIMessage("Done.")]))
    middleware = [
        MemoryContextMiddleware(service, agent_name=AGENT),
        MemoryMiddleware(service, agent_name=AGENT),
    ]
    agent = create_agent(model, [lookup], system_prompt=BASE_PROMPT, middleware=middleware)

    agent.invoke(_say("Look x up."), _config("t", user_id))

    assert len(model.received) == 2
    assert model.system_prompt(0) == model.system_prompt(1)
    assert "Prefers tabs" in model.system_prompt(1)


def test_ids_come_from_the_runtime_context(
    service: MemoryService, sqlite_url: str, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    @dataclass
    class Context:
        thread_id: str
        user_id: str
        tenant_id: str

    _add_fact(sqlite_url, user_id, "Prefers tabs")  # tenant "default": not this tenant's
    queued = _spy(monkeypatch, service, "after_agent")
    model = _model()
    agent = _agent(model, service, context_schema=Context, checkpointer=None)

    context = Context(thread_id="ctx-thread", user_id=user_id, tenant_id="acme")
    agent.invoke(_say("I deploy with pnpm."), context=context)

    assert len(queued) == 1
    assert queued[0]["thread_id"] == "ctx-thread"
    assert queued[0]["user_id"] == user_id
    assert queued[0]["tenant_id"] == "acme"
    assert queued[0]["agent_name"] == AGENT
    assert _texts(queued[0]["args"][0]) == ["I deploy with pnpm.", "Noted."]
    assert "Prefers tabs" not in model.system_prompt()  # another tenant's memory


def test_without_a_thread_id_nothing_is_queued_but_memory_is_injected(
    service: MemoryService, sqlite_url: str, user_id: str
) -> None:
    _add_fact(sqlite_url, user_id, "Prefers tabs")
    model = _model()
    agent = _agent(model, service, checkpointer=None)

    agent.invoke(_say("I deploy with pnpm."), _config(None, user_id))

    assert service.status()["pending"] == 0
    assert "Prefers tabs" in model.system_prompt()


def test_async_agents(service: MemoryService, sqlite_url: str, user_id: str) -> None:
    _add_fact(sqlite_url, user_id, "Prefers tabs")
    model = _model()
    agent = _agent(model, service)

    asyncio.run(agent.ainvoke(_say("I deploy with pnpm."), _config("t", user_id)))

    assert "Prefers tabs" in model.system_prompt()
    assert service.status()["pending"] == 1


def test_a_fixed_date_and_a_structured_system_prompt(service: MemoryService, user_id: str) -> None:
    model = _model()
    context = MemoryContextMiddleware(service, agent_name=AGENT, today=lambda: date(2026, 6, 30))
    base = SystemMessage(content=[{"type": "text", "text": BASE_PROMPT}])
    agent = create_agent(model, [], system_prompt=base, middleware=[context])

    agent.invoke(_say("Hi."), _config("t", user_id))

    system = model.received[-1][0]
    assert isinstance(system, SystemMessage)
    assert system.content[0] == {"type": "text", "text": BASE_PROMPT}
    assert "<current_date>2026-06-30, Tuesday</current_date>" in system.text


def test_nothing_is_injected_for_an_empty_memory_without_date_when_empty(
    service: MemoryService, user_id: str
) -> None:
    model = _model()
    context = MemoryContextMiddleware(service, agent_name=AGENT, date_when_empty=False)
    agent = create_agent(model, [], system_prompt=BASE_PROMPT, middleware=[context])

    agent.invoke(_say("Hi."), _config("t", user_id))

    assert model.system_prompt() == BASE_PROMPT


def _summarizing(service: Any) -> MemorySummarizationMiddleware:
    """Summarizes at 4 messages, keeping the last 2, with a fake model writing the summary."""
    summary_model = GenericFakeChatModel(messages=itertools.repeat("The user deploys with pnpm."))
    return MemorySummarizationMiddleware(
        service, summary_model, agent_name=AGENT, trigger=("messages", 4), keep=("messages", 2)
    )


def test_summarization_hands_the_dropped_messages_over_first(
    llm: Any, sqlite_url: str, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm.reply(json.dumps(update_reply()))
    service = MemoryService(llm_config(llm, storage=sqlite_url, debounce_seconds=60))
    try:
        flushed = _spy(monkeypatch, service, "before_summarization")
        queued = _spy(monkeypatch, service, "after_agent")
        model = _model()
        agent = _agent(model, service, _summarizing(service))
        config = _config("long", user_id)

        agent.invoke(_say("first: I deploy with pnpm"), config)
        agent.invoke(_say("second: and I use Python"), config)
        assert flushed == []
        agent.invoke(_say("third: what next?"), config)  # 5 messages: summarized

        assert len(flushed) == 1
        assert flushed[0]["thread_id"] == "long"
        assert flushed[0]["user_id"] == user_id
        assert flushed[0]["agent_name"] == AGENT
        assert _texts(flushed[0]["args"][0]) == [
            "first: I deploy with pnpm",
            "Noted.",
            "second: and I use Python",
        ]
        # the model saw the summary; the end-of-run conversation leaves the summary out
        assert "The user deploys with pnpm." in _texts(model.received[-1])[1]
        assert _texts(queued[-1]["args"][0]) == ["Noted.", "third: what next?", "Noted."]
    finally:
        service.close(timeout=10)


def test_the_summarization_hand_off_reaches_the_llm(
    llm: Any, sqlite_url: str, user_id: str
) -> None:
    llm.reply(json.dumps(update_reply()))
    service = MemoryService(llm_config(llm, storage=sqlite_url, debounce_seconds=60))
    try:
        model = _model()
        summarizing = _summarizing(service)
        agent = create_agent(model, [], middleware=[summarizing], checkpointer=InMemorySaver())
        config = _config("long", user_id)
        for text in ("first: I deploy with pnpm", "second: and I use Python", "third: next?"):
            agent.invoke(_say(text), config)

        assert service.flush(timeout=30)
        sent = json.dumps(llm.requests[-1]["messages"])
        assert "first: I deploy with pnpm" in sent
        assert "third: next?" not in sent
    finally:
        service.close(timeout=10)


def test_before_summarization_hook_as_a_function(
    service: MemoryService, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed = _spy(monkeypatch, service, "before_summarization")
    hook = before_summarization_hook(service, agent_name=AGENT)

    @dataclass
    class Runtime:
        context: dict[str, str]

    messages = [HumanMessage("I deploy with pnpm"), AIMessage("Noted.")]
    assert hook(messages, Runtime({"thread_id": "t", "user_id": user_id})) is True
    assert flushed[0]["thread_id"] == "t" and flushed[0]["user_id"] == user_id
    assert hook(messages, Runtime({"user_id": user_id})) is False  # no thread: skipped
    assert len(flushed) == 1


def test_the_hooks_never_raise_when_the_database_is_gone(
    service: MemoryService,
    sqlite_url: str,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        tables = sa.MetaData()
        tables.reflect(conn)
        tables.drop_all(conn)
    engine.dispose()
    model = _model()
    agent = _agent(model, service, _summarizing(service))
    config = _config("t", user_id)

    with caplog.at_level(logging.WARNING):
        for text in ("first: I deploy with pnpm", "second: and I use Python", "third: next?"):
            result = agent.invoke(_say(text), config)
            assert result["messages"][-1].text == "Noted."

    assert len(model.received) == 3
    assert "<user_memory>" not in model.system_prompt()
    # the service logged each failed read instead of raising; the conversations wait in the
    # spool for the database, whose outage each loop (the spool's, the worker's if it looked
    # meanwhile) logs once
    reads = [r for r in caplog.records if r.name == "memory_sql.service"]
    assert reads and all(r.levelno == logging.WARNING for r in reads)
    outage = Counter(r.args[0] for r in caplog.records if "database unavailable" in r.msg)
    assert outage["memory_sql spool"] == 1 and set(outage.values()) == {1}, outage
    assert len(service.spool) >= 1


class _Broken:
    """A service that breaks its promise never to raise."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{name} exploded")

        return fail


def test_the_hooks_never_raise_even_when_the_service_does(
    user_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = _model()
    broken = _Broken()
    agent = _agent(model, broken, _summarizing(broken))
    config = _config("t", user_id)

    with caplog.at_level(logging.ERROR, logger="memory_sql.integrations.langchain"):
        for text in ("one", "two", "three"):
            agent.invoke(_say(text), config)
        asyncio.run(agent.ainvoke(_say("four"), _config("u", user_id)))

    assert model.system_prompt() == BASE_PROMPT
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "after_agent hook failed" in logged
    assert "reading the memory context failed" in logged
    assert "before_summarization hand-off failed" in logged


def test_the_core_does_not_import_langchain_and_the_extra_is_named() -> None:
    code = (
        "import sys\n"
        "import memory_sql, memory_sql.service\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('langchain', 'langgraph')]\n"
        "sys.modules['langchain.agents.middleware'] = None\n"
        "try:\n"
        "    import memory_sql.integrations.langchain\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install -e '.[langchain]'" in out.stdout


def test_the_context_is_ranked_by_the_runs_turn(llm: Any, sqlite_url: str, user_id: str) -> None:
    with open_storage(sqlite_url) as store:
        doc = store.load(user_id=user_id, agent_name=AGENT)
        doc.facts = [
            Fact(content=f"Keeps houseplant number {n}", confidence=0.99) for n in range(80)
        ]
        doc.facts.append(Fact(content="Allergic to peanuts", category="context", confidence=0.7))
        store.save(doc, user_id=user_id, agent_name=AGENT)
    config = llm_config(llm, storage=sqlite_url, injected_memory_max_tokens=150)
    with MemoryService(config, start=False) as service:
        for ranked, expected in ((True, True), (False, False)):
            model = _model()
            context = MemoryContextMiddleware(service, agent_name=AGENT, ranked=ranked)
            agent = create_agent(model, [], system_prompt=BASE_PROMPT, middleware=[context])
            agent.invoke(
                _say("What should I avoid eating? peanuts?"), _config(f"t{ranked}", user_id)
            )
            assert ("Allergic to peanuts" in model.system_prompt()) is expected
        # frozen per thread unless refresh_each_run: the second turn of a thread reads anew
        model = _model()
        context = MemoryContextMiddleware(service, agent_name=AGENT, refresh_each_run=True)
        agent = create_agent(model, [], system_prompt=BASE_PROMPT, middleware=[context])
        agent.invoke(_say("Tell me about houseplant number 7"), _config("fresh", user_id))
        assert "Allergic to peanuts" not in model.system_prompt()
        agent.invoke(_say("and peanuts: am I allergic?"), _config("fresh", user_id))
        assert "Allergic to peanuts" in model.system_prompt()
