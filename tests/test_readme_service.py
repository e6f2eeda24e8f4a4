"""The HTTP walkthrough runs as written, in the order the pages give it, as one session against
one real ``memory-sql serve``: the HTTP service page's ```console block that starts the
service (``db upgrade``, then ``serve``, run in the background here), its ``curl`` session
(each ``$`` command in one bash session, in a fresh folder, with the installed ``memory-sql``
on ``PATH``, as after ``source .venv/bin/activate``), its ```python session with the
key the ``curl`` session made, then the MCP page's three client configs (the ```json blocks),
each started as a client would start it, with the SDK's own client. Each command's output must
match the one the page shows, where ``…`` stands for any text and a date for any date. Only
the port, the key and the paths differ."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from doc_pages import CLONE, blocks, commands, mcp_configs, pattern, without_comment
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pg_cluster import free_port
from server.mcp_session import ok

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = ("source .venv/bin/activate",)  # done by the test: the installed command on PATH
PAGE_URL = "http://127.0.0.1:8080"


def console_blocks() -> list[str]:
    return blocks("console", "http-service.md")


def test_the_pages_have_the_walkthrough_the_client_session_and_three_mcp_configs():
    starts = [b for b in console_blocks() if "memory-sql serve --url" in b and "curl" not in b]
    sessions = [b for b in console_blocks() if b.startswith("$ KEY=$(memory-sql keys create")]
    assert (len(starts), len(sessions)) == (1, 1)
    assert len(blocks("python", "http-service.md")) == 1
    configs = mcp_configs()
    assert [c.get("type", "stdio") for c in configs] == ["http", "stdio", "stdio"]
    # every config names the walkthrough's user and agent; the stdio ones by an absolute path
    assert configs[0]["headers"]["X-Memory-User"] == "alice"
    assert configs[0]["headers"]["X-Memory-Agent"] == "coder"
    for config in configs[1:]:
        assert Path(config["command"]).is_absolute(), config["command"]
        args = config["args"]
        assert args[args.index("--user") + 1] == "alice"
        assert args[args.index("--agent") + 1] == "coder"


def test_the_http_walkthrough_runs_as_written_in_order(tmp_path, monkeypatch):
    blocks_ = console_blocks()
    (start,) = [b for b in blocks_ if "memory-sql serve --url" in b and "curl" not in b]
    (session,) = [b for b in blocks_ if b.startswith("$ KEY=$(memory-sql keys create")]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whatever is installed

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    server = None
    try:
        for command, _shown in commands(start):
            command = without_comment(command).replace("8080", str(port))
            if command.strip() in SKIPPED:
                continue
            if command.startswith("memory-sql serve"):
                log = (tmp_path / "serve.log").open("wb")
                server = subprocess.Popen(
                    [*shlex.split(command), "--port", str(port)],
                    cwd=tmp_path,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                _wait_for(f"http://127.0.0.1:{port}/readyz", server, tmp_path / "serve.log")
                continue
            done = run(command)
            assert done.returncode == 0, (command, done.stdout, done.stderr)

        # The curl session: one bash, so that $KEY and $FACT carry from one command to the
        # next; each command's output goes to a file of its own, and the key to one at the end.
        script = []
        steps = commands(session)
        for number, (command, _shown) in enumerate(steps):
            command = command.replace("8080", str(port))
            script.append(f"{{ {command}\n}} > out.{number} 2> err.{number}; echo $? > rc.{number}")
        script.append('echo "$KEY" > key')
        done = run("\n".join(script))
        assert done.returncode == 0, done.stderr
        for number, (command, shown) in enumerate(steps):
            output = (tmp_path / f"out.{number}").read_text(encoding="utf-8").strip()
            errors = (tmp_path / f"err.{number}").read_text(encoding="utf-8")
            code = (tmp_path / f"rc.{number}").read_text().strip()
            assert code == "0", (command, output, errors)
            if shown:
                assert pattern(shown).fullmatch(output), (command, shown, output)
            else:
                assert output == "", (command, output)
        key = (tmp_path / "key").read_text().strip()
        assert key.startswith("msk_")

        base_url = f"http://127.0.0.1:{port}"
        _the_client_session_goes_on(base_url, key, monkeypatch)
        _the_mcp_configs_read_the_walkthroughs_memory(base_url, key, tmp_path)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    assert server.returncode == 0, (tmp_path / "serve.log").read_text()
    assert (tmp_path / "memory.db").exists()  # the page's own file, in the working folder


def _the_client_session_goes_on(base_url: str, key: str, monkeypatch) -> None:
    """The ```python block, after the curl session, with the key it made."""
    monkeypatch.setenv("MEMORY_SQL_API_KEY", key)
    (code,) = blocks("python", "http-service.md")
    assert PAGE_URL in code
    namespace: dict[str, Any] = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(PAGE_URL, base_url), "docs client", "exec"), namespace)
    text = printed.getvalue()
    assert "<user_memory>" in text, text
    assert "Deploys with pnpm, never npm" in text and "Runs CI on GitHub Actions" in text
    # the numbers the page's comments give, in the walkthrough's order
    assert "the memory is no longer at version 3 (it is now 4)" in text, text
    assert namespace["queued"].queued is True
    assert [f.id for f in namespace["found"].facts] == [namespace["added"].fact.id]
    changed, added = namespace["changed"], namespace["added"]
    assert (changed.version, changed.fact.confidence) == (added.version + 1, 0.95)


def _the_mcp_configs_read_the_walkthroughs_memory(base_url: str, key: str, folder: Path) -> None:
    http_config, local_config, remote_config = mcp_configs()
    script = str(Path(sys.executable).parent / "memory-sql")
    inherited = {"PYTHONPATH": str(ROOT), "HOME": str(folder)}

    def real(text: str) -> str:
        return (
            text.replace(PAGE_URL, base_url)
            .replace("msk_…", key)
            .replace(f"{CLONE}/.venv/bin/memory-sql", script)
            .replace(CLONE, str(folder))
        )

    async def memory(client: Client) -> dict[str, Any]:
        async with client:
            return ok(await client.call_tool("get_memory", {}))

    async def session() -> list[dict[str, Any]]:
        headers = {name: real(value) for name, value in http_config["headers"].items()}
        http = httpx2.AsyncClient(headers=headers, timeout=30.0)
        async with http:
            transport = streamable_http_client(real(http_config["url"]), http_client=http)
            answers = [await memory(Client(transport))]
        for config in (local_config, remote_config):
            params = StdioServerParameters(
                command=real(config["command"]),
                args=[real(arg) for arg in config["args"]],
                env={**{k: real(v) for k, v in config["env"].items()}, **inherited},
            )
            answers.append(await memory(Client(params)))
        return answers

    walkthrough = ["Deploys with pnpm, never npm", "Runs CI on GitHub Actions"]
    for answer in asyncio.run(session()):
        assert sorted(f["content"] for f in answer["facts"]) == walkthrough, answer


def _wait_for(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"memory-sql serve did not answer: {log.read_text()}")
