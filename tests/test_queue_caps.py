"""What one queue row may hold is capped: flushes of one thread accumulate up to
``queue_max_row_messages`` messages and ``queue_max_row_bytes`` bytes, then the oldest are cut
and counted. Real SQLite files."""

from __future__ import annotations

import json

import sqlalchemy as sa
from llm_server import llm_config

from memory_sql import MemoryService
from memory_sql.schema import memory_pending_updates as pending


def conversation(n: int, turns: int, size: int = 10) -> list[dict[str, str]]:
    messages = []
    for t in range(turns):
        messages.append({"role": "user", "content": f"m{n}-{t} " + "x" * size})
        messages.append({"role": "assistant", "content": f"r{n}-{t} " + "y" * size})
    return messages


def stored(service: MemoryService) -> list[dict]:
    with service.queue.engine.connect() as conn:
        return json.loads(conn.execute(sa.select(pending.c.messages)).scalar_one())


def test_flushes_of_one_thread_stop_growing_at_the_message_cap(tmp_path, llm):
    config = llm_config(llm, storage=f"sqlite:///{tmp_path / 'm.db'}", queue_max_row_messages=150)
    with MemoryService(config, start=False) as service:
        for n in range(20):  # 20 flushes of 100 messages: 2 000 would accumulate
            assert service.before_summarization(conversation(n, 50), thread_id="t", user_id="u")
        messages = stored(service)
        status = service.status()
    assert len(messages) == 150
    assert messages[-1]["text"].startswith("r19-49")  # the newest kept, the oldest cut
    assert messages[0]["text"].startswith("m18-25")
    assert status["trimmed_messages"] == 2000 - 150


def test_a_row_stops_growing_at_the_byte_cap(tmp_path, llm):
    config = llm_config(llm, storage=f"sqlite:///{tmp_path / 'm.db'}", queue_max_row_bytes=20_000)
    with MemoryService(config, start=False) as service:
        for n in range(10):
            service.before_summarization(conversation(n, 5, size=1000), thread_id="t", user_id="u")
        with service.queue.engine.connect() as conn:
            body = conn.execute(sa.select(pending.c.messages)).scalar_one()
        assert len(body) <= 20_000
        assert json.loads(body)[-1]["text"].startswith("r9-4")
        assert service.status()["trimmed_messages"] > 0
        # One turn alone over the cap is cut too: the debounced kind holds its newest part.
        service.after_agent(conversation(99, 40, size=1000), thread_id="big", user_id="u")
        with service.queue.engine.connect() as conn:
            turn = conn.execute(
                sa.select(pending.c.messages).where(pending.c.thread_id == "big")
            ).scalar_one()
    assert len(turn) <= 20_000 and json.loads(turn)[-1]["text"].startswith("r99-39")
