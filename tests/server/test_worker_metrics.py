"""``memory-sql worker --metrics-port``: a worker of its own (as docker-compose runs it) shows
the updates it ran, its LLM calls and tokens, and the queue, in Prometheus' format."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
from llm_server import update_reply
from pg_cluster import free_port
from test_cli_pipeline import stop, worker_env

from memory_sql import MemoryConfig, MemoryService, migrations

CONVERSATION = [
    {"role": "user", "content": "I only drink green tea."},
    {"role": "assistant", "content": "Green tea it is."},
]


def metrics_of(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.TransportError:
        return ""


def test_a_worker_serves_the_metrics_of_its_updates(tmp_path, llm):
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    migrations.upgrade(url)
    flawed = update_reply()
    flawed["newFacts"].append({"content": "...", "confidence": 0.9, "scope": "user"})
    llm.reply(json.dumps(flawed), prompt_tokens=120, completion_tokens=30)
    port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "memory_sql", "worker", "--url", url, "--metrics-port", str(port)],
        env={**worker_env(llm), "MEMORY_SQL_DEBOUNCE_SECONDS": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "memory_sql_queue_rows" not in metrics_of(port):
            time.sleep(0.1)
        before = metrics_of(port)
        assert 'memory_sql_queue_rows{status="pending"} 0.0' in before, before
        with MemoryService(MemoryConfig(storage=url, debounce_seconds=0), start=False) as client:
            assert client.queue_conversation(CONVERSATION, thread_id="t1", user_id="u1")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "memory_sql_llm_calls_total 1.0" not in (
            text := metrics_of(port)
        ):
            time.sleep(0.1)
        assert 'memory_sql_updates_total{outcome="ok"} 1.0' in text, text
        assert "memory_sql_llm_prompt_tokens_total 120.0" in text
        assert "memory_sql_llm_completion_tokens_total 30.0" in text
        assert "memory_sql_llm_call_duration_seconds_count 1.0" in text
        assert 'memory_sql_reply_items_rejected_total{reason="placeholder"} 1.0' in text
        assert 'memory_sql_reply_items_rejected_total{reason="one_off"} 0.0' in text
    finally:
        code, _, output = stop(worker)
    assert code == 0, output
    assert f"metrics at http://127.0.0.1:{port}/metrics" in output
