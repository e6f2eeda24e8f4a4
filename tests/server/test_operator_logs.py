"""What an operator of ``memory-sql serve`` sees (issue 34): a log of one line a request and
one an update under the README's walkthrough, no library chatter, JSON when asked, a client
that hangs up mid-request neither a traceback nor a 500, a busy port refused in one line
before anything starts, and a service with no model saying so in its answers (its updates
wait, they are not failed, and nothing is counted as an LLM call)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import yaml
from llm_server import ScriptedLLM, update_reply
from pg_cluster import free_port

from memory_sql.client import MemoryClient
from server.mcp_session import ok, over_http
from server.service_process import ServiceProcess

CHAT = [
    {"role": "user", "content": "I write all my services in Python."},
    {"role": "assistant", "content": "Noted: Python it is."},
]
CHATTER = ("Added job", "Running job", "executed successfully", "Terminating session")


def access_lines(log: str) -> list[dict]:
    return [
        json.loads(line[line.index("{") :])
        for line in log.splitlines()
        if "memory_sql.server.access" in line
    ]


def wait_for(condition: Callable[[], object], timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def test_the_walkthrough_logs_one_line_a_request_and_one_an_update(
    start_service: Callable[..., ServiceProcess],
    make_key: Callable[..., str],
    llm: ScriptedLLM,
) -> None:
    llm.reply(json.dumps(update_reply()))
    llm.reply(json.dumps(update_reply()))
    service = start_service()
    key = make_key("acme", "write")
    requests = 0  # the walkthrough's, with a key (the start-up's /healthz polls have none)
    with service.client(key) as http:
        for path in ("/healthz", "/readyz"):
            assert http.get(path).status_code == 200
        for thread in ("t1", "t2"):
            body = {"user_id": "alice", "agent_name": "coder", "thread_id": thread}
            queued = http.post("/v1/conversations", json={**body, "messages": CHAT})
            assert queued.status_code == 202, queued.text
            requests += 1
            assert "warning" not in queued.json() and "warning" not in queued.headers

            def learned() -> bool:
                nonlocal requests
                requests += 1
                return http.get("/v1/queue").json()["updates"] == []

            wait_for(learned)
        facts = http.get("/v1/users/alice/facts", params={"agent_name": "coder"})
        requests += 1
        assert [f["content"] for f in facts.json()["facts"]] == ["Prefers Python"]
        assert (
            http.post(
                "/v1/users/alice/facts",
                params={"agent_name": "coder"},
                json={"content": "Uses vim"},
            ).status_code
            == 201
        )
        requests += 1
        assert http.get("/v1/users/alice/context", params={"agent_name": "coder"}).is_success
        requests += 1

    async def over_mcp() -> None:
        async with over_http(service.base_url, key) as mcp:
            ok(await mcp.call_tool("get_context", {"user_id": "alice", "agent_name": "coder"}))

    asyncio.run(over_mcp())
    wait_for(lambda: len([a for a in access_lines(service.log) if a["tenant"]]) >= requests)
    time.sleep(1.5)  # a sweep or two of the worker: it must not log on its own
    log = service.log
    lines = log.splitlines()
    start = next(n for n, line in enumerate(lines) if "Uvicorn running on" in line) + 1
    served = [line for line in lines[start:] if "memory_sql.server.access" in line]
    assert len(served) >= requests, log
    updates = [line for line in lines[start:] if "memory_sql.update.updater" in line]
    assert len(updates) == 2, log
    # Beside them, one line at /mcp's first request (its server is built then), and no other.
    others = [line for line in lines[start:] if line not in served + updates]
    assert len(others) <= 1 and all("MCP server built" in line for line in others), others
    for noise in (*CHATTER, "HTTP Request:"):
        assert noise not in log, noise


def test_json_logs_are_one_object_a_line(
    start_service: Callable[..., ServiceProcess], make_key: Callable[..., str]
) -> None:
    service = start_service(log_format="json")
    key = make_key("acme", "read")
    with service.client(key, **{"X-Request-ID": "walk-1"}) as http:
        assert http.get("/v1/users/alice/facts").status_code == 404  # no memory yet
    wait_for(lambda: "walk-1" in service.log)
    records = [json.loads(line) for line in service.log.splitlines() if line.strip()]
    (access,) = [r for r in records if r.get("request_id") == "walk-1"]
    assert access["logger"] == "memory_sql.server.access" and access["level"] == "INFO"
    assert access["route"] == "/v1/users/{user_id}/facts" and access["status"] == 404
    assert access["tenant"] == "acme" and access["time"].endswith("Z")
    assert any("serving database" in r.get("message", "") for r in records)


def _hang_up_mid_body(port: int, path: str, headers: str = "") -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\n{headers}"
            'Content-Length: 5000\r\n\r\n{"user_id": '.encode()
        )
        time.sleep(0.3)


def test_a_client_that_hangs_up_mid_request_is_not_an_error(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key = make_key("acme", "write")
    bearer = f"Authorization: Bearer {key}\r\n"
    for path in ("/v1/conversations", "/mcp"):
        _hang_up_mid_body(service.port, path, bearer)
    wait_for(lambda: len(access_lines(service.log)) >= 3)
    log = service.log
    assert "Traceback" not in log and "ClientDisconnect" not in log, log
    assert " ERROR " not in log, log
    statuses = {line["route"]: line["status"] for line in access_lines(log)}
    assert statuses == {"/healthz": 200, "/v1/conversations": 499, "/mcp": 499}, log
    with service.client() as http:
        metrics = http.get("/metrics").text
    assert 'status="500"' not in metrics and 'status="499"' in metrics


def test_a_busy_port_is_one_error_line_before_anything_starts(tmp_path) -> None:
    database = tmp_path / "busy.db"
    from memory_sql import migrations

    migrations.upgrade(f"sqlite:///{database}")
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = subprocess.run(
            [sys.executable, "-m", "memory_sql", "serve", "--url", f"sqlite:///{database}",
             "--port", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    output = (result.stdout + result.stderr).strip().splitlines()
    assert len(output) == 1, output
    assert output[0].startswith("error: cannot listen on 127.0.0.1:") and str(port) in output[0]
    assert "choose another --port" in output[0]


@pytest.fixture
def no_model_settings(service_settings: dict) -> dict:
    return {key: value for key, value in service_settings.items() if key != "model_name"}


def test_a_service_with_no_model_says_updates_wait_and_counts_no_call(
    tmp_path, no_model_settings: dict, make_key: Callable[..., str], llm: ScriptedLLM
) -> None:
    config = tmp_path / "no-model.yaml"
    config.write_text(yaml.safe_dump({"memory": no_model_settings}), encoding="utf-8")
    env = {"OPENAI_MODEL": ""}
    key = make_key("acme", "write")
    admin = make_key("acme", "admin")
    with ServiceProcess(tmp_path, no_model_settings, env=env) as service:
        with service.client(key) as http:
            ready = http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ready"
            assert "no memory LLM model is configured" in ready.json()["warning"]
            assert ready.headers["warning"].startswith('199 memory-sql "no memory LLM model')
            queued = http.post(
                "/v1/conversations", json={"user_id": "alice", "thread_id": "t1", "messages": CHAT}
            )
            assert queued.status_code == 202
            answer = queued.json()
            assert answer["queued"] is True
            assert answer["due"] == "when a memory LLM model is configured"
            assert "updates wait in the queue" in answer["warning"]
            assert "model_name" in queued.headers["warning"]
        with MemoryClient(service.base_url, api_key=key) as memory:
            typed = memory.queue_conversation("bob", CHAT, thread_id="t2")
            assert typed.queued and "no memory LLM model" in (typed.warning or "")
        time.sleep(3)  # three sweeps: a service that tried would have failed the update
        with service.client(admin) as http:
            rows = http.get("/v1/queue").json()["updates"]
            assert len(rows) == 2, rows
            for row in rows:
                assert row["status"] == "pending" and row["attempts"] == 0, row
                assert "no memory LLM model is configured" in row["last_error"]
            totals = http.get("/v1/reports").json()["totals"]
            assert totals["llm_calls"] == 0, totals
        assert llm.requests == []
        assert service.log.count("no memory LLM model is configured") == 1
