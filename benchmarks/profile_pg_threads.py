"""Where the CPU of PostgreSQL saves from 8 threads goes: memory_sql's add (cached load, append,
save) and LangGraph's ``PostgresStore.put``, each from 8 threads of one process on 8 users,
with the CPU each side spent per save: the client process (user and system time, from
``os.times``) and the server processes serving it (its backends, told apart by
``application_name``, from ``/proc``). Issue #32's goal "saves/s at 8 threads ÷ LangGraph's
≥ 1" is a race for the same 2 cores: the side that spends less CPU per save, client and server
together, saves more.

    .venv/bin/python benchmarks/profile_pg_threads.py [--rounds N] [--saves N]

The sides take turns, ``--rounds`` times (3), ``--saves`` saves a round (2 400). Equal
durability: one server, ``synchronous_commit`` on, every save committed. The bench extra is
needed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from _common import cpu_seconds, libpq_url, measured_source, named_url, scratch_postgres
from bench_peers import (
    AGENT,
    FACTS,
    THREADS,
    Facts,
    langgraph_postgres,
    memory_store,
    namespace,
    value_of,
)

from memory_sql import MemoryDocument


def _option(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def backends_cpu(url: str, application: str) -> float:
    """CPU seconds so far of the server processes serving ``application``."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,)
            )
        ]
    return sum(map(cpu_seconds, pids))


def run_threads(work: list[Callable[[], None]]) -> float:
    threads = [threading.Thread(target=one) for one in work]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def measured(
    url: str, application: str, work: list[Callable[[], None]], saves: int
) -> dict[str, float]:
    """Saves/s and CPU µs per save (client user, client system, server) of one round."""
    server = backends_cpu(url, application)
    client = os.times()
    seconds = run_threads(work)
    after = os.times()
    server = backends_cpu(url, application) - server
    return {
        "saves/s": saves / seconds,
        "client user": 1e6 * (after.user - client.user) / saves,
        "client system": 1e6 * (after.system - client.system) / saves,
        "server": 1e6 * server / saves,
    }


def main() -> int:
    rounds, saves = _option("--rounds", 3), _option("--saves", 2400)
    per = saves // THREADS
    print(f"memory_sql measured: {measured_source()}; load average {os.getloadavg()[0]:.2f}")
    facts = Facts(7)
    users = [f"threads-{t}" for t in range(THREADS)]
    with ExitStack() as stack:
        ms_url = stack.enter_context(scratch_postgres())
        lg_url = stack.enter_context(scratch_postgres())
        if ms_url is None or lg_url is None:
            sys.exit("PostgreSQL unreachable")
        store = memory_store(named_url(ms_url, "profiled-ms"))
        stack.callback(store.close)
        lg = langgraph_postgres(named_url(libpq_url(lg_url), "profiled-lg"), stack)
        for user in users:
            batch = facts.many(FACTS)
            store.save(MemoryDocument(facts=batch), user_id=user, agent_name=AGENT)
            for fact in batch:
                lg.put(namespace(user), fact.id, value_of(fact))

        def ms_work(user: str) -> Callable[[], None]:
            mine = facts.many(per, "threaded")

            def run() -> None:
                for fact in mine:
                    doc = store.load(user_id=user, agent_name=AGENT)
                    doc.facts.append(fact)
                    store.save(doc, user_id=user, agent_name=AGENT)

            return run

        def lg_work(user: str) -> Callable[[], None]:
            mine = facts.many(per, "threaded")

            def run() -> None:
                for fact in mine:
                    lg.put(namespace(user), fact.id, value_of(fact))

            return run

        figures: dict[str, list[dict[str, float]]] = {"memory_sql": [], "LangGraph": []}
        for _ in range(rounds):
            work = [ms_work(user) for user in users]
            figures["memory_sql"].append(measured(ms_url, "profiled-ms", work, per * THREADS))
            work = [lg_work(user) for user in users]
            figures["LangGraph"].append(measured(lg_url, "profiled-lg", work, per * THREADS))

    print(
        f"\n{THREADS} threads on {THREADS} users, {per * THREADS} saves a round, {rounds} rounds "
        "taking turns (median of the rounds; CPU µs per save)"
    )
    columns = ("saves/s", "client user", "client system", "server")
    print(f"  {'':12}" + "".join(f"{c:>15}" for c in columns) + f"{'CPU in all':>15}")
    median: dict[str, dict[str, float]] = {}
    for side, runs in figures.items():
        median[side] = {c: sorted(r[c] for r in runs)[len(runs) // 2] for c in columns}
        total = sum(median[side][c] for c in columns[1:])
        cells = "".join(f"{median[side][c]:15.0f}" for c in columns)
        print(f"  {side:12}{cells}{total:15.0f}")
    ratio: Any = {
        c: median["memory_sql"][c] / median["LangGraph"][c]
        for c in columns
        if median["LangGraph"][c]
    }
    print("  memory_sql ÷ LangGraph " + "  ".join(f"{c} {v:.2f}x" for c, v in ratio.items()))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
