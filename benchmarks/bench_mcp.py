"""The MCP server and the typed client against plain HTTP, on one real service.

    .venv/bin/python benchmarks/bench_mcp.py [--requests N] [--rounds R]

One ``memory-sql serve --no-worker`` on a free 127.0.0.1 port, on a SQLite file seeded
through memory_sql's storage (50 users x 30 facts, agent ``coder``, tenant ``acme``). The same
read, the context block for a turn (``GET /v1/users/{user}/context?q=…`` and the MCP tool
``get_context`` with ``query``), the users round-robin, one client at a time, three ways:

- **httpx**: a keep-alive ``httpx.Client`` sending the route's request by hand;
- **MemoryClient**: ``memory_sql.client.MemoryClient.context`` (the same request, typed);
- **MCP**: the MCP SDK's own client over Streamable HTTP at ``/mcp`` (``call_tool``).

The three take turns round by round. Printed: requests/s (median of the rounds) and p50/p99
latency per side, and the ratios of p50 latencies (> 1: the first is slower). Then the cost
of the MCP SDK: the wall time of ``import memory_sql.server.app`` (the service's start; the
SDK is imported at the first ``/mcp`` request) against the same with ``memory_sql.mcp.http``
(what that first request adds), each in a fresh interpreter, median of 5. Every answer is checked
(a context without the user's facts is an error; exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server.service_process import ServiceProcess

from memory_sql import migrations, ops
from memory_sql.client import MemoryClient
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from memory_sql.storage import SQLStorage

USERS = 50
FACTS = 30
QUERY = "which editor do they use?"
SERVICE = "import memory_sql.server.app"


def seed(url: str) -> str:
    migrations.upgrade(url)
    engine = create_engine(url)
    storage = SQLStorage(engine)
    try:
        for user in range(USERS):
            for n in range(FACTS):
                ops.add_fact(
                    storage,
                    f"User {user} fact {n}: prefers editor number {n}",
                    user_id=f"u{user}",
                    agent_name="coder",
                    tenant_id="acme",
                )
        return create_key(engine, tenant_id="acme", role="read")[1]
    finally:
        storage.close()
        engine.dispose()


def timed(call: Callable[[str], str], users: list[str]) -> list[float]:
    latencies = []
    for user in users:
        started = time.perf_counter()
        text = call(user)
        latencies.append(time.perf_counter() - started)
        if f"User {user[1:]} fact" not in text:
            raise SystemExit(f"error: the context of {user} lacks its facts: {text[:200]!r}")
    return latencies


def import_seconds(statement: str) -> float:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"machine: nproc {os.cpu_count()}, load average {load:.1f}, Python "
        f"{platform.python_version()}, SQLite file, one client at a time"
    )
    folder = Path(tempfile.mkdtemp(prefix="bench_mcp_"))
    url = f"sqlite:///{folder / 'bench.db'}"
    key = seed(url)
    settings = {"storage": url, "token_counting": False}
    users = [f"u{i % USERS}" for i in range(args.requests)]
    results: dict[str, list[list[float]]] = {"httpx": [], "MemoryClient": [], "MCP": []}
    with ServiceProcess(folder, settings, with_worker=False) as service:
        raw = httpx.Client(
            base_url=service.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        typed = MemoryClient(service.base_url, api_key=key)

        def by_hand(user: str) -> str:
            answer = raw.get(
                f"/v1/users/{user}/context", params={"agent_name": "coder", "q": QUERY}
            )
            answer.raise_for_status()
            return answer.json()["context"]

        def with_client(user: str) -> str:
            return typed.context(user, agent_name="coder", query=QUERY).context

        async def over_mcp(rounds: int) -> list[list[float]]:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
            transport = streamable_http_client(f"{service.base_url}/mcp", http_client=http)
            measured = []
            async with http, Client(transport) as mcp:
                for _ in range(rounds):
                    latencies = []
                    for user in users:
                        started = time.perf_counter()
                        result = await mcp.call_tool(
                            "get_context",
                            {"user_id": user, "agent_name": "coder", "query": QUERY},
                        )
                        latencies.append(time.perf_counter() - started)
                        text = (result.structured_content or {}).get("context", "")
                        if result.is_error or f"User {user[1:]} fact" not in text:
                            raise SystemExit(f"error: MCP get_context of {user}: {result}")
                    measured.append(latencies)
            return measured

        timed(by_hand, users[:20])  # warm both sides' connections and caches
        timed(with_client, users[:20])
        for _ in range(args.rounds):
            results["httpx"].append(timed(by_hand, users))
            results["MemoryClient"].append(timed(with_client, users))
            results["MCP"].extend(asyncio.run(over_mcp(1)))
        raw.close()
        typed.close()

    p50 = {}
    print(f"\nthe context for a turn, {args.requests} requests x {args.rounds} rounds")
    print(f"{'side':<14}{'requests/s':>12}{'p50':>12}{'p99':>12}")
    for side, rounds in results.items():
        every = sorted(x for r in rounds for x in r)
        rate = statistics.median(len(r) / sum(r) for r in rounds)
        p50[side] = every[len(every) // 2]
        p99 = every[min(len(every) - 1, int(len(every) * 0.99))]
        print(f"{side:<14}{rate:>12,.0f}{p50[side] * 1000:>10.2f}ms{p99 * 1000:>10.2f}ms")
    print(f"\nMemoryClient ÷ httpx (p50): {p50['MemoryClient'] / p50['httpx']:.2f}x")
    print(f"MCP ÷ MemoryClient (p50):   {p50['MCP'] / p50['MemoryClient']:.2f}x")
    print(f"MCP ÷ httpx (p50):          {p50['MCP'] / p50['httpx']:.2f}x")

    base = import_seconds(SERVICE)
    with_sdk = import_seconds(f"{SERVICE}, memory_sql.mcp.http")
    print(
        f"\nstart: {SERVICE[7:]} {base:.2f} s (the service's start: the SDK waits for the first"
        f" /mcp request); with memory_sql.mcp.http {with_sdk:.2f} s (the first /mcp request"
        f" adds {with_sdk - base:.2f} s); ratio {with_sdk / base:.2f}x"
    )


if __name__ == "__main__":
    main()
