"""The documentation's examples that need a running service, each run on its own against a
fresh ``memory-sql serve`` (tests/test_readme_service.py runs them after the walkthrough, in
order): the typed client's session (the HTTP service page's ```python block, its URL
replaced by the service's, the key in ``MEMORY_SQL_API_KEY``), and each MCP client config
(the MCP page's ```json blocks): started as a client would, with the SDK's own client."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from doc_pages import CLONE, blocks, mcp_configs
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from server.mcp_session import ok
from server.service_process import ServiceProcess

ROOT = Path(__file__).resolve().parents[2]
README_URL = "http://127.0.0.1:8080"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_client_session_runs_as_written(
    service: ServiceProcess,
    make_key: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MEMORY_SQL_API_KEY", make_key("acme", "write"))
    (code,) = blocks("python", "http-service.md")
    assert README_URL in code
    namespace: dict[str, Any] = {}
    exec(compile(code.replace(README_URL, service.base_url), "docs client", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "<user_memory>" in printed and "Runs CI on GitHub Actions" in printed
    # on a memory of its own the versions start at 1: the page's comments are the walkthrough's
    assert "the memory is no longer at version 1 (it is now 2)" in printed
    assert namespace["queued"].queued is True
    assert [f.id for f in namespace["found"].facts] == [namespace["added"].fact.id]
    assert (namespace["changed"].version, namespace["changed"].fact.confidence) == (2, 0.95)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_mcp_configs_work_as_pasted(
    service: ServiceProcess, make_key: Callable[..., str], tmp_path: Path
) -> None:
    key = make_key("acme", "write")
    http_config, local_config, remote_config = mcp_configs()
    script = str(Path(sys.executable).parent / "memory-sql")
    inherited = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HOME": str(tmp_path)}

    def real(text: str) -> str:
        return (
            text.replace(README_URL, service.base_url)
            .replace("msk_…", key)
            .replace(f"{CLONE}/.venv/bin/memory-sql", script)
            .replace(CLONE, str(tmp_path))
        )

    async def call(client: Client, arguments: dict[str, Any]) -> dict[str, Any]:
        async with client:
            ok(await client.call_tool("add_fact", arguments))
            return ok(await client.call_tool("get_memory", {}))

    async def session() -> list[dict[str, Any]]:
        headers = {name: real(value) for name, value in http_config["headers"].items()}
        http = httpx2.AsyncClient(headers=headers, timeout=30.0)
        async with http:
            transport = streamable_http_client(real(http_config["url"]), http_client=http)
            over_http = await call(Client(transport), {"content": "Pasted the HTTP config"})
        answers = [over_http]
        for config in (local_config, remote_config):
            params = StdioServerParameters(
                command=real(config["command"]),
                args=[real(arg) for arg in config["args"]],
                env={**{k: real(v) for k, v in config["env"].items()}, **inherited},
            )
            answers.append(await call(Client(params), {"content": "Pasted a stdio config"}))
        return answers

    over_http, local, remote = asyncio.run(session())
    assert [f["content"] for f in over_http["facts"]] == ["Pasted the HTTP config"]
    assert [f["content"] for f in local["facts"]] == ["Pasted a stdio config"]
    assert (tmp_path / "memory.db").exists()
    # the remote stdio server reached the same user of the same tenant as the HTTP config
    assert sorted(f["content"] for f in remote["facts"]) == [
        "Pasted a stdio config",
        "Pasted the HTTP config",
    ]
