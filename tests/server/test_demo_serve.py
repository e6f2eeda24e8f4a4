"""``memory-sql demo --serve`` as a newcomer runs it, with no API key of any model: a real
subprocess serving the API on a fresh SQLite file with the recorded replies replayed; the key
and the request bodies it prints are enough to post a sample conversation with httpx and see the
context change (the worker in the service, or a separate ``memory-sql worker`` given the config
file it wrote)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pg_cluster import free_port
from worker_process import WorkerProcess

from memory_sql.demo import RECORDINGS_FILE, read_data

FIRST = read_data(RECORDINGS_FILE)["responses"][0]
LEARNED = FIRST["reply"]["newFacts"][0]["content"]  # the intro conversation's first fact


class Demo:
    def __init__(self, folder: Path, *extra: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        environment = {
            k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_SQL_", "OPENAI_"))
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memory_sql", "demo", "--serve", "--port", str(self.port)]
            + list(extra),
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**environment, "COLUMNS": "300", "NO_COLOR": "1"},
        )
        self.printed = []
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.printed.append(line)
            if line.startswith("Serving on"):
                break
        text = "".join(self.printed)
        assert "Serving on" in text, text
        self.key = re.search(r"^  KEY=(\S+)$", text, re.M)[1]
        self.bodies = re.findall(r"--data @(\S+\.json)", text)
        self.config = re.search(r"memory-sql worker --config (\S+\.yaml)\)", text)[1]
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and self.process.poll() is None, text
            time.sleep(0.1)

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(30)
        return self.process.returncode


def post_and_watch(demo: Demo, seconds: float = 20) -> str:
    """Post the first sample conversation as printed; the context once it shows its fact."""
    body = json.loads(Path(demo.bodies[0]).read_text(encoding="utf-8"))
    where = f"/v1/users/{body['user_id']}/context"
    params = {"agent_name": body["agent_name"]}
    with demo.client() as client:
        before = client.get(where, params=params)
        assert before.status_code == 200 and before.json() == {"context": "", "version": 0}
        sent = client.post("/v1/conversations", json=body)
        assert sent.status_code == 202, sent.text
        deadline = time.monotonic() + seconds
        while LEARNED not in (context := client.get(where, params=params).json()["context"]):
            assert time.monotonic() < deadline, f"not learned within {seconds} s: {context!r}"
            time.sleep(0.1)
    return context


def test_demo_serve_learns_a_posted_sample_conversation_with_no_model_key(tmp_path):
    demo = Demo(tmp_path)
    try:
        assert len(demo.bodies) >= 3 and all(Path(b).is_file() for b in demo.bodies)
        context = post_and_watch(demo)
        assert context.count("<user_memory>") == 1
    finally:
        assert demo.stop() == 0
    assert (tmp_path / "memory_sql_demo.db").is_file()


@pytest.mark.slow
def test_a_separate_worker_learns_from_the_demo_service(tmp_path):
    demo = Demo(tmp_path, "--no-worker")
    try:
        config = json.loads(Path(demo.config).read_text(encoding="utf-8"))["memory"]
        assert config["llm"]["model"] == "memory-sql-demo-replay"
        with WorkerProcess(tmp_path, config):
            post_and_watch(demo)
    finally:
        assert demo.stop() == 0
