"""The MCP SDK's own client, connected over real HTTP (a running ``memory-sql serve``'s
``/mcp``) or over a real stdio subprocess (``memory-sql mcp``), and what tests read off it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

TOOLS = {
    "get_context",
    "search_facts",
    "add_fact",
    "update_fact",
    "delete_fact",
    "remember_conversation",
    "get_memory",
    "fact_history",
}


@asynccontextmanager
async def over_http(base_url: str, key: str | None, **headers: str) -> AsyncIterator[Client]:
    sent = dict(headers)
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    http = httpx2.AsyncClient(headers=sent, timeout=30.0)
    async with http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as c:
        yield c


@asynccontextmanager
async def over_stdio(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_SQL_")}
    environment.update(env or {})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memory_sql", "mcp", *args], env=environment
    )
    async with Client(params) as client:
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a call that must have succeeded (its text is the same JSON)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error(result: CallToolResult) -> str:
    """The text of a call that must have failed, which must not be a traceback."""
    assert result.is_error, result.structured_content
    text = " ".join(block.text for block in result.content)
    assert "Traceback" not in text and 'File "' not in text, text
    return text
