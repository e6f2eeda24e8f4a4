"""A conversation is filtered once, at intake: what leaves intake is what the queue stores and
the updater reads, on every path from a host to a saved memory."""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from llm_server import llm_config
from test_service import chat, learn

from memory_sql import MemoryService
from memory_sql.intake.filter import filter_messages_for_memory
from memory_sql.intake.messages import normalize_messages
from memory_sql.intake.signals import signals_of_kept
from memory_sql.schema import memory_pending_updates as pending

WATCHED = {
    filter_messages_for_memory.__code__: "filter",
    normalize_messages.__code__: "normalize",
    signals_of_kept.__code__: "signals",
}


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_url")


@contextmanager
def counting_calls() -> Iterator[Counter[str]]:
    """Counts calls of the watched functions in every thread, however they were imported."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in WATCHED:
            with lock:
                calls[WATCHED[frame.f_code]] += 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("immediate", [False, True], ids=["after_agent", "before_summarization"])
def test_one_filter_pass_from_the_hook_to_the_saved_memory(db_url, llm, immediate) -> None:
    llm.responder = learn
    user = f"u-once-{uuid.uuid4().hex[:8]}"
    messages = [
        {"role": "system", "content": "You are helpful."},
        *chat("tea"),
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "Anything else?"},
        *chat("jazz"),
        {"role": "user", "content": "I like rain and no, that's wrong about jazz"},
        {"role": "assistant", "content": "Fixed."},
    ]
    with counting_calls() as calls:
        service = MemoryService(
            llm_config(llm, storage=db_url, debounce_seconds=0.05, sweep_interval_seconds=30)
        )
        try:
            hook = service.before_summarization if immediate else service.after_agent
            assert hook(messages, thread_id="once", user_id=user)
            assert service.flush(timeout=20)
            doc = service.storage.load(user_id=user)
        finally:
            service.close(timeout=10)
    assert {f.content for f in doc.facts} >= {"Likes tea", "Likes jazz", "Likes rain"}
    assert calls == Counter(filter=1, normalize=1, signals=1)
    (prompt,) = [body["messages"][-1]["content"] for body in llm.requests]
    assert "You are helpful." not in prompt and "User: ok" not in prompt
    assert "Correction" in prompt or "correct" in prompt.lower()


def test_the_kept_conversation_is_what_the_queue_stores(db_url, llm) -> None:
    user = f"u-kept-{uuid.uuid4().hex[:8]}"
    raw = [*chat("tea"), {"role": "tool", "content": "42"}, *chat("rain")]
    raw[-2]["content"] = "Yes, exactly! I like rain"
    with MemoryService(llm_config(llm, storage=db_url), start=False) as service:
        kept = service.take_conversation(raw)
        assert service.queue_kept(kept, thread_id="kept", user_id=user)
        service.spool.write()
        with service.queue.engine.connect() as conn:
            stored, signals = conn.execute(
                sa.select(pending.c.messages, pending.c.reinforcement).where(
                    pending.c.user_id == user
                )
            ).one()
    assert [m.text for m in kept.turns] == [
        "I like tea",
        "Noted: tea.",
        "Yes, exactly! I like rain",
        "Noted: rain.",
    ]
    stored = json.loads(stored) if isinstance(stored, str) else stored
    assert stored == [m.to_dict() for m in kept.turns]
    assert kept.signals.reinforcement and bool(signals)
