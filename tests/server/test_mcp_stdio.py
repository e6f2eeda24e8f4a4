"""``memory-sql mcp`` as a real stdio subprocess, driven by the MCP SDK's own client: on a
local database (SQLite and PostgreSQL) and in front of a real ``memory-sql serve`` (a key
and the service's URL); tenants kept apart, a fixed user, the version conflict path."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from memory_sql.storage import open_storage
from server.mcp_session import TOOLS, error, ok, over_stdio
from server.service_process import ServiceProcess


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_local_database_with_a_fixed_user(database_url: str) -> None:
    local = ["--url", database_url, "--no-worker"]

    async def session() -> None:
        async with over_stdio("--user", "alice", "--tenant", "acme", *local) as mcp:
            assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS
            resources = (await mcp.list_resources()).resources
            assert [str(r.uri) for r in resources] == ["memory://alice"]
            fact = ok(await mcp.call_tool("add_fact", {"content": "Drinks green tea"}))["fact"]
            assert (fact["tenant_id"], fact["user_id"]) == ("acme", "alice")
            ok(await mcp.call_tool("add_fact", {"content": "Lives in Lyon", "version": 1}))
            text = error(
                await mcp.call_tool(
                    "update_fact", {"fact_id": fact["id"], "content": "Drinks coffee", "version": 1}
                )
            )
            assert "version_conflict" in text
            changed = ok(
                await mcp.call_tool(
                    "update_fact", {"fact_id": fact["id"], "content": "Drinks coffee", "version": 2}
                )
            )
            assert changed["version"] == 3
            context = ok(await mcp.call_tool("get_context", {"query": "coffee"}))
            assert "Drinks coffee" in context["context"]
            text = error(await mcp.call_tool("get_memory", {"user_id": "bob"}))
            assert "'alice' only" in text
            text = error(await mcp.call_tool("add_fact", {"content": ["not", "text"]}))
            assert "invalid_request" in text and "content" in text
            document = await mcp.read_resource("memory://alice")
            assert "Drinks coffee" in document.contents[0].text
        async with over_stdio("--user", "alice", "--tenant", "other", *local) as other:
            memory = ok(await other.call_tool("get_memory", {}))
            assert (memory["version"], memory["facts"]) == (0, [])
            found = ok(await other.call_tool("search_facts", {"query": "coffee"}))
            assert found["facts"] == []

    run(session())
    with open_storage(database_url) as storage:
        doc = storage.load(user_id="alice", tenant_id="acme")
        assert sorted(f.content for f in doc.facts) == ["Drinks coffee", "Lives in Lyon"]
        assert storage.load(user_id="alice", tenant_id="other").version == 0


def test_in_front_of_a_service_with_a_key(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key, reader = make_key("acme", "write"), make_key("acme", "read")
    remote = ["--service", service.base_url, "--user", "alice"]

    async def session() -> None:
        async with over_stdio(*remote, env={"MEMORY_SQL_API_KEY": key}) as mcp:
            fact = ok(await mcp.call_tool("add_fact", {"content": "Runs Debian"}))["fact"]
            assert fact["tenant_id"] == "acme"
            ok(await mcp.call_tool("add_fact", {"content": "Uses zsh", "version": 1}))
            text = error(await mcp.call_tool("delete_fact", {"fact_id": fact["id"], "version": 1}))
            assert "version_conflict" in text and "it is now 2" in text
            text = error(await mcp.call_tool("add_fact", {"content": "runs   DEBIAN"}))
            assert "duplicate_fact" in text
            text = error(await mcp.call_tool("fact_history", {"fact_id": "fact_000000000000"}))
            assert "not_found" in text
            history = ok(await mcp.call_tool("fact_history", {"fact_id": fact["id"]}))
            assert [e["event"] for e in history["events"]] == ["added"]
            memory = ok(await mcp.call_tool("get_memory", {}))
            assert memory["version"] == 2
        async with over_stdio(*remote, "--key", reader) as read_only:
            found = ok(await read_only.call_tool("search_facts", {"query": "debian"}))
            assert [f["content"] for f in found["facts"]] == ["Runs Debian"]
            text = error(await read_only.call_tool("add_fact", {"content": "x"}))
            assert "forbidden" in text
        async with over_stdio(*remote, "--key", make_key("other")) as elsewhere:
            assert ok(await elsewhere.call_tool("search_facts", {}))["facts"] == []

    run(session())
    with service.client(key) as http:  # what the stdio server wrote is the service's
        facts = http.get("/v1/users/alice/facts").json()["facts"]
    assert sorted(f["content"] for f in facts) == ["Runs Debian", "Uses zsh"]


def test_an_unreachable_service_is_a_tool_error_and_bad_flags_one_line() -> None:
    async def session() -> str:
        async with over_stdio(
            "--service", "http://127.0.0.1:9", "--key", "msk_x", "--user", "alice"
        ) as mcp:
            return error(await mcp.call_tool("get_memory", {}))

    text = run(session())
    assert text.startswith("unreachable") or "unreachable: cannot reach" in text
    done = subprocess.run(
        [sys.executable, "-m", "memory_sql", "mcp", "--service", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("MEMORY_SQL_")},
            "NO_COLOR": "1",
            "COLUMNS": "200",
        },
    )
    assert done.returncode == 1
    assert "needs an API key" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""  # stdout is the protocol's
