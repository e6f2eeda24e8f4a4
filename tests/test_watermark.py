"""The durable watermark: only the turns after the last one learned from go to the memory LLM,
with a short marked context; it lives in the database (restarts and workers share it), moves
only with a successful update, and a conversation that lost its watermark message is sent whole."""

from __future__ import annotations

import json
import multiprocessing
import re

import pytest
import sqlalchemy as sa
from _workers import run_service_until_idle
from llm_server import ScriptedLLM, llm_config

from memory_sql import MemoryService
from memory_sql.intake.messages import Message
from memory_sql.schema import memory_pending_updates
from memory_sql.tokens import EstimateCounter
from memory_sql.update.watermark import CONTEXT_TOKENS, Mark, message_key, split

EMPTY = json.dumps({"user": {}, "history": {}, "newFacts": [], "factsToRemove": []})
TURN = re.compile(r"turn (\d+) ")


def turn(n: int) -> list[dict]:
    topic = ["the billing service", "a flaky test", "the CI cache", "PostgreSQL indexes"][n % 4]
    user = f"This is turn {n} of our chat: help me with {topic}, and keep the answer short."
    reply = f"Answer {n}: for {topic}, " + "start with the simplest change that works. " * (
        n % 3 + 1
    )
    return [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def conversation(upto: int, start: int = 1) -> list[dict]:
    return [m for n in range(start, upto + 1) for m in turn(n)]


def _service(llm: ScriptedLLM, url: str, *, watermark: bool = True) -> MemoryService:
    llm.responder = lambda body: EMPTY
    service = MemoryService(
        llm_config(
            llm,
            storage=url,
            debounce_seconds=3600,
            max_debounce_seconds=3600,
            sweep_interval_seconds=30,
        )
    )
    if not watermark:
        service.update_run.has_watermarks = False  # the baseline: every update sends it all
    return service


def _sections(body: dict) -> tuple[str, str]:
    prompt = body["messages"][-1]["content"]
    new = prompt.split("<conversation>")[1].split("</conversation>")[0]
    context = ""
    if "<earlier_context>" in prompt:
        context = prompt.split("<earlier_context>")[1].split("</earlier_context>")[0]
    return new, context


def _feed(service: MemoryService, turns: int, every: int, thread: str = "t60") -> None:
    for n in range(1, turns + 1):
        assert service.after_agent(conversation(n), thread_id=thread, user_id="u1")
        if n % every == 0:
            assert service.flush(timeout=20)


def test_sixty_turns_each_sent_once_as_new_text(sqlite_url, tmp_path):
    with ScriptedLLM() as llm:
        service = _service(llm, sqlite_url)
        try:
            _feed(service, 60, 5)
        finally:
            service.close(timeout=10)
        bodies = list(llm.requests)
        with_mark = sum(p for _, p, _ in llm.usage)
    counter = EstimateCounter()
    assert len(bodies) == 12
    seen: list[int] = []
    for body in bodies:
        new, context = _sections(body)
        seen += [int(n) for n in TURN.findall(new)]
        assert counter.count(context) <= CONTEXT_TOKENS + 20
    assert sorted(seen) == list(range(1, 61))  # every turn once as new text
    assert all("already learned" in _sections(b)[1] for b in bodies[1:])

    baseline_url = f"sqlite:///{tmp_path / 'baseline.db'}"
    with ScriptedLLM() as llm:
        service = _service(llm, baseline_url, watermark=False)
        try:
            _feed(service, 60, 5)
        finally:
            service.close(timeout=10)
        without = sum(p for _, p, _ in llm.usage)
        baseline_bodies = list(llm.requests)

    def conversation_tokens(requests: list[dict]) -> int:
        return sum(counter.count("".join(_sections(body))) for body in requests)

    sent, resent = conversation_tokens(bodies), conversation_tokens(baseline_bodies)
    print(
        f"\n60 turns, an update every 5: prompt tokens {with_mark} with the watermark, "
        f"{without} without ({with_mark / without:.2f}x; the fixed system prompt is most of "
        f"what is left); conversation text {sent} vs {resent} tokens ({sent / resent:.2f}x)"
    )
    assert with_mark < 0.6 * without
    assert sent < 0.25 * resent


def test_nothing_new_makes_no_call_and_the_row_completes(sqlite_url, llm):
    service = _service(llm, sqlite_url)
    try:
        service.after_agent(conversation(3), thread_id="t", user_id="u1")
        assert service.flush(timeout=20)
        assert len(llm.requests) == 1
        service.after_agent(conversation(3), thread_id="t", user_id="u1")  # the same again
        assert service.flush(timeout=20)
        assert len(llm.requests) == 1
        with service.storage.engine.connect() as conn:
            assert (
                conn.execute(
                    sa.select(sa.func.count()).select_from(memory_pending_updates)
                ).scalar_one()
                == 0
            )
    finally:
        service.close(timeout=10)


def test_the_watermark_survives_a_restart_and_is_shared(sqlite_url):
    with ScriptedLLM() as llm:
        first = _service(llm, sqlite_url)
        try:
            first.after_agent(conversation(4), thread_id="t", user_id="u1")
            assert first.flush(timeout=20)
        finally:
            first.close(timeout=10)
    # A new service (another worker, or the same after a restart) shares nothing in memory.
    with ScriptedLLM() as llm:
        second = _service(llm, sqlite_url)
        try:
            second.after_agent(conversation(6), thread_id="t", user_id="u1")
            assert second.flush(timeout=20)
        finally:
            second.close(timeout=10)
        [body] = llm.requests
    new, context = _sections(body)
    assert [int(n) for n in TURN.findall(new)] == [5, 6]
    assert "turn 4 " in context


def test_a_summarised_conversation_is_sent_whole(sqlite_url, llm):
    service = _service(llm, sqlite_url)
    try:
        service.after_agent(conversation(4), thread_id="t", user_id="u1")
        assert service.flush(timeout=20)
        # Turns 1-4 summarised away: the watermark's message is gone.
        summary = [{"role": "user", "content": "Summary so far: we fixed billing and CI things."}]
        service.after_agent(
            summary + [{"role": "assistant", "content": "Right."}] + conversation(6, 5),
            thread_id="t",
            user_id="u1",
        )
        assert service.flush(timeout=20)
    finally:
        service.close(timeout=10)
    new, context = _sections(llm.requests[-1])
    assert "Summary so far" in new and [int(n) for n in TURN.findall(new)] == [5, 6]
    assert context == ""


def test_a_failed_update_does_not_move_it(sqlite_url, llm):
    service = _service(llm, sqlite_url)
    try:
        service.after_agent(conversation(2), thread_id="t", user_id="u1")
        assert service.flush(timeout=20)
        llm.reply("down", status=500)
        llm.reply("down", status=500)  # the client's one retry
        service.after_agent(conversation(4), thread_id="t", user_id="u1")
        service.flush(timeout=5)
        service.retry_failed()
        service.after_agent(conversation(4), thread_id="t", user_id="u1")
        assert service.flush(timeout=20)
    finally:
        service.close(timeout=10)
    new, _ = _sections(llm.requests[-1])
    assert [int(n) for n in TURN.findall(new)] == [3, 4]  # sent again, not skipped


def test_split_by_id_and_by_digest():
    counter = EstimateCounter()
    messages = [
        Message(role="user", text="hi there", id="m1"),
        Message(role="assistant", text="yo"),
    ]
    assert message_key(messages[0]) == "id:m1"
    assert message_key(messages[1]).startswith("sha256:") and len(message_key(messages[1])) <= 64
    cut = split(messages, Mark("id:m1", 0), counter)
    assert [m.text for m in cut.new] == ["yo"] and not cut.whole
    assert [m.text for m in cut.context] == ["hi there"]
    # The position moved (a message inserted before): found by its key.
    cut = split([Message(role="user", text="new first")] + messages, Mark("id:m1", 0), counter)
    assert [m.text for m in cut.new] == ["yo"]
    assert split(messages, Mark("id:gone", 0), counter).whole
    assert split(messages, None, counter).whole


def _queue(url: str, llm: ScriptedLLM, messages: list[dict]) -> None:
    config = llm_config(llm, storage=url, debounce_seconds=0)
    with MemoryService(config, start=False) as service:
        assert service.after_agent(messages, thread_id="tp", user_id="u1")


def _worker_process(context, url: str, llm: ScriptedLLM) -> None:
    results = context.Queue()
    worker = context.Process(target=run_service_until_idle, args=(url, llm.base_url, {}, results))
    worker.start()
    results.get(timeout=90)
    worker.join(30)
    assert worker.exitcode == 0


@pytest.mark.slow
def test_two_worker_processes_share_the_watermark(sqlite_url, llm):
    context = multiprocessing.get_context("spawn")
    llm.responder = lambda body: EMPTY
    _queue(sqlite_url, llm, conversation(4))
    _worker_process(context, sqlite_url, llm)
    _queue(sqlite_url, llm, conversation(6))
    _worker_process(context, sqlite_url, llm)
    assert len(llm.requests) == 2
    first, second = (_sections(body)[0] for body in llm.requests)
    assert [int(n) for n in TURN.findall(first)] == [1, 2, 3, 4]
    assert [int(n) for n in TURN.findall(second)] == [5, 6]
