"""The MCP server at ``/mcp`` of a real ``memory-sql serve``, driven by the MCP SDK's own
client over real HTTP, on SQLite and PostgreSQL: the tools' typed results, the same API keys
as the routes (tenant, role), the version conflict path, and hostile arguments."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from llm_server import ScriptedLLM
from sqlalchemy import select

from memory_sql.database import create_engine
from memory_sql.schema import (
    memory_fact_events,
    memory_facts,
    memory_pending_updates,
    memory_scopes,
    memory_sections,
    memory_watermarks,
)
from memory_sql.server.keys import create_key
from server.conftest import service_settings_for
from server.mcp_session import TOOLS, error, ok, over_http
from server.service_process import ServiceProcess
from server.test_row_level_security import SEEDED, AppRole, _seed, app_role  # noqa: F401


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_first_requests_to_mcp_arriving_together_are_all_served(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    """The MCP server is built at the first request to ``/mcp``: six sessions opened at once
    on a service that has not built it yet all get their answers."""
    key = make_key("acme", "write")
    with service.client(key) as http:
        assert http.get("/readyz").status_code == 200  # requests, none of them to /mcp
    assert "MCP server built" not in service.log

    async def one(user: str) -> str:
        async with over_http(service.base_url, key) as mcp:
            assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS
            added = ok(await mcp.call_tool("add_fact", {"user_id": user, "content": "Likes tea"}))
            return added["fact"]["content"]

    async def together() -> list[str]:
        return await asyncio.gather(*(one(f"user{n}") for n in range(6)))

    assert run(together()) == ["Likes tea"] * 6
    assert service.log.count("MCP server built at the first request to /mcp") == 1
    assert '"route": "/mcp"' in service.log and '"route": "unmatched"' not in service.log
    with service.client(key) as http:
        for n in range(6):
            facts = http.get(f"/v1/users/user{n}/facts").json()["facts"]
            assert [fact["content"] for fact in facts] == ["Likes tea"]


def test_the_tools_answer_typed_results_for_the_keys_tenant(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key = make_key("acme", "write")

    async def session() -> None:
        async with over_http(service.base_url, key) as mcp:
            listed = await mcp.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            by_name = {tool.name: tool for tool in listed.tools}
            assert by_name["get_context"].annotations.read_only_hint is True
            assert by_name["delete_fact"].annotations.destructive_hint is True
            assert "version" in by_name["update_fact"].output_schema["properties"]

            added = ok(
                await mcp.call_tool(
                    "add_fact",
                    {"user_id": "alice", "content": "Deploys with pnpm", "category": "preference"},
                )
            )
            assert added["version"] == 1
            assert added["fact"]["tenant_id"] == "acme"
            fact_id = added["fact"]["id"]

            found = ok(await mcp.call_tool("search_facts", {"user_id": "alice", "query": "PNPM"}))
            assert [f["id"] for f in found["facts"]] == [fact_id]
            context = ok(
                await mcp.call_tool("get_context", {"user_id": "alice", "query": "deploy"})
            )
            assert "Deploys with pnpm" in context["context"] and context["version"] == 1

            changed = ok(
                await mcp.call_tool(
                    "update_fact",
                    {"user_id": "alice", "fact_id": fact_id, "confidence": 0.99, "version": 1},
                )
            )
            assert (changed["fact"]["confidence"], changed["version"]) == (0.99, 2)
            history = ok(
                await mcp.call_tool("fact_history", {"user_id": "alice", "fact_id": fact_id})
            )
            assert [e["event"] for e in history["events"]] == [
                "added",
                "updated",
            ]  # oldest first, as the HTTP history

            memory = ok(await mcp.call_tool("get_memory", {"user_id": "alice"}))
            assert memory["version"] == 2
            assert [f["content"] for f in memory["facts"]] == ["Deploys with pnpm"]
            resource = await mcp.read_resource("memory://alice")
            assert '"Deploys with pnpm"' in resource.contents[0].text

            queued = ok(
                await mcp.call_tool(
                    "remember_conversation",
                    {
                        "user_id": "alice",
                        "thread_id": "t1",
                        "messages": [
                            {"role": "user", "content": "I moved to Berlin last month."},
                            {"role": "assistant", "content": "Noted: Berlin."},
                        ],
                    },
                )
            )
            assert queued["queued"] is True

            removed = ok(
                await mcp.call_tool(
                    "delete_fact", {"user_id": "alice", "fact_id": fact_id, "version": 2}
                )
            )
            assert removed["version"] == 3

    run(session())
    with service.client(key) as http:  # the queued conversation is the service's own queue
        rows = http.get("/v1/queue", params={"user_id": "alice"}).json()["updates"]
    assert [row["thread_id"] for row in rows] in (["t1"], [])  # [] once the worker ran it


def test_a_stale_version_is_a_version_conflict_and_changes_nothing(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key = make_key("acme", "write")

    async def session() -> None:
        async with over_http(service.base_url, key, **{"X-Memory-User": "alice"}) as mcp:
            fact = ok(await mcp.call_tool("add_fact", {"content": "Prefers tabs"}))["fact"]
            ok(await mcp.call_tool("add_fact", {"content": "Uses vim", "version": 1}))
            text = error(
                await mcp.call_tool(
                    "update_fact",
                    {"fact_id": fact["id"], "content": "Prefers spaces", "version": 1},
                )
            )
            assert "version_conflict" in text and "version 1" in text and "get_memory" in text
            text = error(await mcp.call_tool("delete_fact", {"fact_id": fact["id"], "version": 1}))
            assert "version_conflict" in text
            memory = ok(await mcp.call_tool("get_memory", {}))
            assert memory["version"] == 2
            assert sorted(f["content"] for f in memory["facts"]) == ["Prefers tabs", "Uses vim"]
            text = error(await mcp.call_tool("add_fact", {"content": "PREFERS   TABS"}))
            assert "duplicate_fact" in text
            text = error(
                await mcp.call_tool("update_fact", {"fact_id": "fact_nope", "confidence": 0.1})
            )
            assert "not_found" in text and "fact_nope" in text

    run(session())


def test_x_memory_agent_names_the_agent_of_a_call_that_names_none(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key = make_key("acme", "write")
    headers = {"X-Memory-User": "alice", "X-Memory-Agent": "coder"}

    async def session() -> None:
        async with over_http(service.base_url, key, **headers) as mcp:
            ok(await mcp.call_tool("add_fact", {"content": "Deploys with pnpm"}))
            memory = ok(await mcp.call_tool("get_memory", {}))
            assert [f["content"] for f in memory["facts"]] == ["Deploys with pnpm"]
            unnamed = ok(await mcp.call_tool("get_memory", {"agent_name": "other"}))
            assert unnamed["facts"] == []

    run(session())
    with service.client(key) as http:  # the fact is in alice's memory of the agent coder
        coder = http.get("/v1/users/alice/facts", params={"agent_name": "coder"}).json()
        unnamed = http.get("/v1/users/alice/facts")
    assert [f["content"] for f in coder["facts"]] == ["Deploys with pnpm"]
    assert unnamed.status_code == 404  # the unnamed agents' memory was never written
    answer = httpx.post(
        f"{service.base_url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Authorization": f"Bearer {key}", "X-Memory-Agent": "no agent"},
        timeout=10,
    )
    assert answer.status_code == 400 and "X-Memory-Agent" in answer.json()["error"]["message"]


def test_tenants_and_roles_are_the_keys(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    key_a, key_b, reader = make_key("A"), make_key("B"), make_key("A", "read")

    async def session() -> None:
        async with over_http(service.base_url, key_a) as a:
            ok(await a.call_tool("add_fact", {"user_id": "alice", "content": "Secret of A"}))
        async with over_http(service.base_url, key_b) as b:
            found = ok(await b.call_tool("search_facts", {"user_id": "alice"}))
            assert found["facts"] == []
            memory = ok(await b.call_tool("get_memory", {"user_id": "alice"}))
            assert (memory["version"], memory["facts"]) == (0, [])
            context = ok(await b.call_tool("get_context", {"user_id": "alice"}))
            assert "Secret" not in context["context"]
            # a tenant argument is no way out: the key's tenant is the only one
            found = ok(await b.call_tool("search_facts", {"user_id": "alice", "tenant_id": "A"}))
            assert found["facts"] == []
            resource = await b.read_resource("memory://alice")
            assert "Secret" not in resource.contents[0].text
        async with over_http(service.base_url, reader) as r:
            found = ok(await r.call_tool("search_facts", {"user_id": "alice"}))
            assert [f["content"] for f in found["facts"]] == ["Secret of A"]
            text = error(await r.call_tool("add_fact", {"user_id": "alice", "content": "x"}))
            assert "forbidden" in text and "(read) cannot write" in text
        async with over_http(service.base_url, key_a, **{"X-Memory-User": "alice"}) as fixed:
            text = error(await fixed.call_tool("get_memory", {"user_id": "bob"}))
            assert "forbidden" in text and "'alice' only" in text
        async with over_http(service.base_url, key_a) as unfixed:
            text = error(await unfixed.call_tool("get_memory", {}))
            assert "user_id is required" in text

    run(session())


def test_a_request_without_a_valid_key_is_refused_before_the_protocol(
    service: ServiceProcess, make_key: Callable[..., str]
) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer msk_0000000000000000_" + "x" * 43}):
        answer = httpx.post(f"{service.base_url}/mcp", json=body, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "unauthorized"
    key = make_key("A")
    answer = httpx.post(
        f"{service.base_url}/mcp",
        json=body,
        headers={"Authorization": f"Bearer {key}", "X-Memory-Tenant": "B"},
        timeout=10,
    )
    assert answer.status_code == 403
    answer = httpx.post(
        f"{service.base_url}/mcp",
        json=body,
        headers={"Authorization": f"Bearer {key}", "X-Memory-User": "../etc"},
        timeout=10,
    )
    assert answer.status_code == 400 and "X-Memory-User" in answer.json()["error"]["message"]

    async def refused() -> None:
        async with over_http(service.base_url, None) as mcp:
            await mcp.list_tools()

    with pytest.raises(BaseException):  # noqa: B017  (the SDK's client gives up on the 401)
        run(refused())


KEPT = "<the kept fact's id>"
HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("add_fact", {"user_id": "alice", "content": 5}, "content"),
    ("add_fact", {"user_id": "alice", "content": ""}, "content"),
    ("add_fact", {"user_id": "alice", "content": "x" * 10_001}, "content"),
    ("add_fact", {"user_id": "alice", "content": "ok", "confidence": 7}, "confidence"),
    ("add_fact", {"user_id": "alice", "content": "ok", "confidence": "NaN"}, "confidence"),
    ("add_fact", {"user_id": "../../etc/passwd", "content": "ok"}, "user_id"),
    ("add_fact", {"user_id": "alice", "agent_name": "a b", "content": "ok"}, "agent_name"),
    ("add_fact", {"user_id": "alice", "content": "bad\x00byte"}, "NUL"),
    ("add_fact", {"user_id": "alice", "content": "ok", "category": "DROP TABLE;"}, "category"),
    ("add_fact", {"user_id": "alice", "content": "ok", "version": -1}, "version"),
    ("add_fact", {"user_id": ["alice"], "content": "ok"}, "user_id"),
    ("update_fact", {"user_id": "alice", "fact_id": "x"}, "nothing to change"),
    ("update_fact", {"user_id": "alice", "fact_id": "f" * 65, "confidence": 1}, "fact_id"),
    ("search_facts", {"user_id": "alice", "limit": 10**9}, "limit"),
    ("search_facts", {"user_id": "alice", "query": {"$ne": 1}}, "query"),
    ("fact_history", {"user_id": "alice", "fact_id": "x", "after": "9999999999999:x"}, "cursor"),
    ("remember_conversation", {"user_id": "alice", "messages": []}, "messages"),
    (
        "remember_conversation",
        {"user_id": "alice", "messages": [{"role": "root", "content": "hi"}]},
        "role",
    ),
    ("get_context", {"user_id": "alice", "query": "q" * 10_001}, "query"),
    # NUL bytes, which SQLite stores and PostgreSQL's text refuses: every argument that
    # reaches the database is refused before it does, the same on both backends.
    ("add_fact", {"user_id": "al\x00ice", "content": "ok"}, "user_id"),
    ("add_fact", {"user_id": "alice", "agent_name": "co\x00der", "content": "ok"}, "agent_name"),
    ("add_fact", {"user_id": "alice", "content": "ok", "category": "pre\x00f"}, "category"),
    (
        "update_fact",
        {"user_id": "alice", "fact_id": KEPT, "content": "a\x00b", "version": 1},
        "NUL",
    ),
    (
        "update_fact",
        {"user_id": "alice", "fact_id": KEPT, "category": "a\x00b", "version": 1},
        "category",
    ),
    ("update_fact", {"user_id": "alice", "fact_id": "fact\x00", "confidence": 0.5}, "no fact"),
    ("delete_fact", {"user_id": "alice", "fact_id": "fact\x00"}, "no fact"),
    ("delete_fact", {"user_id": "al\x00ice", "fact_id": KEPT, "version": 1}, "user_id"),
    ("search_facts", {"user_id": "alice", "category": "a\x00b"}, "category"),
    ("fact_history", {"user_id": "alice", "fact_id": "fact\x00"}, "no fact"),
    ("fact_history", {"user_id": "alice", "fact_id": KEPT, "after": "1:a\x00b"}, "cursor"),
    ("get_memory", {"user_id": "al\x00ice"}, "user_id"),
    (
        "remember_conversation",
        {"user_id": "alice", "messages": [{"role": "user", "content": "I use \x00 vim"}]},
        "NUL",
    ),
    (
        "remember_conversation",
        {"user_id": "alice", "thread_id": "t\x00", "messages": [{"role": "user", "content": "hi"}]},
        "thread_id",
    ),
]
STORED = (
    memory_scopes,
    memory_sections,
    memory_facts,
    memory_fact_events,
    memory_pending_updates,
    memory_watermarks,
)


def _stored(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the memory tables, as the tables' owner reads them."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                table.name: sorted(
                    (tuple(map(repr, row)) for row in connection.execute(select(table))),
                )
                for table in STORED
            }
    finally:
        engine.dispose()


def test_hostile_arguments_are_errors_naming_the_problem_and_store_nothing(
    service: ServiceProcess, make_key: Callable[..., str], database_url: str
) -> None:
    key = make_key("acme")
    before: dict[str, list[tuple[Any, ...]]] = {}

    async def session() -> list[tuple[str, str]]:
        misses = []
        async with over_http(service.base_url, key) as mcp:
            kept = ok(await mcp.call_tool("add_fact", {"user_id": "alice", "content": "Kept"}))
            before.update(_stored(database_url))
            for tool, arguments, named in HOSTILE:
                arguments = {
                    k: kept["fact"]["id"] if v == KEPT else v for k, v in arguments.items()
                }
                text = error(await mcp.call_tool(tool, arguments))
                if named not in text:
                    misses.append((tool, text))
            unknown = await mcp.call_tool("drop_everything", {})
            assert unknown.is_error
            memory = ok(await mcp.call_tool("get_memory", {"user_id": "alice"}))
            assert [f["content"] for f in memory["facts"]] == ["Kept"]
            assert memory["version"] == 1
        return misses

    assert run(session()) == []
    assert before["memory_facts"] and before["memory_fact_events"]  # the kept fact is seen
    assert _stored(database_url) == before
    assert "Traceback" not in service.log


@pytest.mark.postgres
def test_the_tools_act_for_the_keys_tenant_under_row_level_security(
    app_role: AppRole,  # noqa: F811  (the fixture of test_row_level_security)
    tmp_path: Path,
    llm: ScriptedLLM,
) -> None:
    """The service connects as a role that row-level security holds: the tools see their
    tenant's rows only because they act for it (a connection acting for no tenant sees no
    row at all), and never another tenant's."""
    _seed(app_role.owner_url)
    engine = create_engine(app_role.owner_url)
    try:
        key_a = create_key(engine, tenant_id="A", role="write")[1]
        key_b = create_key(engine, tenant_id="B", role="write")[1]
    finally:
        engine.dispose()
    settings = {**service_settings_for(llm), "storage": app_role.url}

    async def session(service: ServiceProcess) -> None:
        async with over_http(service.base_url, key_a) as a:
            found = ok(await a.call_tool("search_facts", {"user_id": "alice"}))
            assert sorted(f["content"] for f in found["facts"]) == sorted(SEEDED["A"]["alice"])
            assert ok(await a.call_tool("search_facts", {"user_id": "bob"}))["facts"] == []
            added = ok(await a.call_tool("add_fact", {"user_id": "bob", "content": "A's bob"}))
            assert added["fact"]["tenant_id"] == "A"
        async with over_http(service.base_url, key_b) as b:
            found = ok(await b.call_tool("search_facts", {"user_id": "bob"}))
            assert [f["content"] for f in found["facts"]] == SEEDED["B"]["bob"]
            memory = ok(await b.call_tool("get_memory", {"user_id": "alice"}))
            assert memory["facts"] == []

    with ServiceProcess(tmp_path, settings) as service:
        run(session(service))
