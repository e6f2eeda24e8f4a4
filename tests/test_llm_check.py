"""``memory-sql llm check`` as a real subprocess against the scripted LLM in each of its modes
(every format accepted, the ladder's steps refused one by one, an error status) and against a
port where nothing listens: what it prints, what it sent, and its exit status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llm_server import ScriptedLLM
from pg_cluster import free_port

from memory_sql.update.parser import update_json_schema


def check(tmp_path: Path, base_url: str, **settings) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    memory = {"model_name": "test-model", "llm_base_url": base_url, "llm_api_key": "sk-test"}
    config.write_text(yaml.safe_dump({"memory": {**memory, **settings}}), encoding="utf-8")
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_SQL_", "OPENAI_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "memory_sql", "llm", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, "COLUMNS": "200", "NO_COLOR": "1"},
    )


@pytest.mark.parametrize(
    ("refused", "mode", "status"),
    [
        ((), "json_schema", 0),
        (("json_schema",), "json_object with the schema", 0),
        (("json_schema", "json_object+schema"), "json_object (JSON, not held", 0),
        (("json_schema", "json_object+schema", "json_object"), "none (no response_format", 3),
    ],
    ids=["json_schema", "json_object+schema", "json_object", "none"],
)
def test_the_first_accepted_mode_is_reported(tmp_path, llm, refused, mode, status):
    llm.responder = lambda body: '{"ok": true}'
    for kind in refused:
        llm.refuse_format(kind, status=400)
    done = check(tmp_path, llm.base_url, llm_max_retries=2)
    assert done.returncode == status, done.stdout + done.stderr
    assert f"memory LLM: {llm.base_url}, model test-model" in done.stdout
    assert f"structured output: {mode}" in done.stdout
    # One request per step, none retried though the config allows 2 retries.
    assert [ScriptedLLM.format_of(body) for body in llm.requests] == [*refused, mode_of(mode)]
    assert all(body["max_tokens"] == 16 for body in llm.requests)
    if not refused:
        sent = llm.requests[0]["response_format"]["json_schema"]
        assert sent["schema"] == update_json_schema() and sent["strict"] is True


def mode_of(shown: str) -> str:
    if shown.startswith("json_object with"):
        return "json_object+schema"
    return shown.split()[0]


def test_a_refusal_as_llama_cpp_words_it_goes_down_the_ladder(tmp_path, llm):
    llm.responder = lambda body: '{"ok": true}'
    llm.refuse_format("json_schema", status=500, message="error in response_format: bad")
    done = check(tmp_path, llm.base_url, llm_max_retries=2)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "json_schema: " in done.stdout and "HTTP 500" in done.stdout
    assert len(llm.requests) == 2  # the 500 was not retried by the client


def test_an_error_status_is_not_answering(tmp_path, llm):
    llm.reply("invalid api key", status=401)
    done = check(tmp_path, llm.base_url, llm_max_retries=2)
    assert done.returncode == 1
    assert "does not answer" in done.stderr and "HTTP 401 (check llm_api_key)" in done.stderr
    assert len(llm.requests) == 1
    assert "sk-test" not in done.stdout + done.stderr


def test_a_refused_connection_is_not_answering(tmp_path):
    done = check(tmp_path, f"http://127.0.0.1:{free_port()}/v1")
    assert done.returncode == 1
    assert "connection refused" in done.stderr
    assert "structured output" not in done.stdout


def test_no_model_configured_is_not_answering(tmp_path, llm):
    done = check(tmp_path, llm.base_url, model_name=None)
    assert done.returncode == 1
    assert "no memory LLM model configured" in done.stderr
    assert llm.requests == []


def test_a_slow_model_gets_timeout_retry_and_lease_advice(tmp_path, llm):
    """A model that takes a second for 16 tokens (a small one on a CPU) would take over half
    a minute for a whole reply: over half of a 10 s llm_timeout_seconds, so the check says
    what to set (a timeout above that, no retries, a lease longer than the timeout); a fast
    one gets no such note."""
    llm.reply('{"ok": true}', delay=1.0)
    done = check(tmp_path, llm.base_url, llm_timeout_seconds=10, lease_seconds=60)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = int(re.search(r"may take (\d+) s", done.stdout).group(1))
    assert expected >= 37  # 600 / 16 times the probe's second at least
    timeout = int(re.search(r"\n  llm_timeout_seconds: (\d+)\n", done.stdout).group(1))
    lease = int(re.search(r"\n  lease_seconds: (\d+) ", done.stdout).group(1))
    assert expected < timeout <= 600 and lease > timeout
    assert "  llm_max_retries: 0" in done.stdout

    llm.reply('{"ok": true}')
    fast = check(tmp_path, llm.base_url, llm_timeout_seconds=120)
    assert fast.returncode == 0 and "note:" not in fast.stdout, fast.stdout
