"""The durable queue: enqueue latency with 10 000 keys pending against 10, the LLM calls
the per-key debounce saves, on the real queue table; and (PostgreSQL) the worker's throughput
against intake in the same run.

    .venv/bin/python benchmarks/bench_queue.py [--throughput-only]

Throughput: 16 threads queue 2 000 conversations of 2 000 users (``after_agent``), timed:
intake per second. Then 2 worker processes × 8 threads (``memory-sql worker``'s service) drain
them through the scripted chat-completions server of ``tests/llm_server.py``, which answers at
once: updates per second from the first LLM call to the empty queue, and the ratio to intake.

LLM calls are counted on a simulated clock (every enqueue and claim takes an explicit ``now``),
so a two-hour day of traffic runs in seconds: 100 conversations over 10 keys, each key talking
every 10 to 60 s. Compared: no debounce (one call per conversation), DeerFlow's single global
timer (restarted by every conversation of any key; when it fires, every pending key is updated),
and memory_sql's per-key debounce with a maximum wait.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt, scratch_postgres

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.queue import UpdateQueue
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.scope import Scope

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc)
CONVERSATION = [Message("user", "I prefer short answers. " * 20), Message("assistant", "OK " * 50)]
DEBOUNCE, MAX_WAIT = 30.0, 300.0


def populate(engine: sa.Engine, keys: int) -> None:
    now = T0
    rows = [
        {
            "tenant_id": "default",
            "user_id": f"user-{n}",
            "agent_name": "",
            "thread_id": f"thread-{n}",
            "kind": "turn",
            "messages": "[]",
            "correction": False,
            "reinforcement": False,
            "first_enqueued_at": now,
            "last_enqueued_at": now,
            "due_at": now + timedelta(days=1),
            "generation": 1,
            "attempts": 0,
            "status": "pending",
        }
        for n in range(keys)
    ]
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
        for start in range(0, len(rows), 1000):
            conn.execute(sa.insert(pending), rows[start : start + 1000])


def enqueue_latency(engine: sa.Engine, keys: int) -> float:
    populate(engine, keys)
    queue = UpdateQueue(engine, debounce_seconds=DEBOUNCE)
    rng = random.Random(1)
    times = []
    for i in range(400):
        n = rng.randrange(keys)
        scope = Scope.of(user_id=f"user-{n}")
        thread = f"thread-{n}" if i % 2 else f"new-{i}"  # half update a key, half add one
        start = time.perf_counter()
        queue.add(scope, thread, CONVERSATION, Signals(), now=T0)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def traffic(gaps: tuple[float, float], seed: int = 7) -> list[tuple[float, int]]:
    """100 conversations over 10 keys, each key's turns ``gaps`` seconds apart:
    (seconds since start, key), in time order."""
    rng = random.Random(seed)
    events = []
    for key in range(10):
        t = rng.uniform(0, 30)
        for _ in range(10):
            events.append((t, key))
            t += rng.uniform(*gaps)
    return sorted(events)


def per_key_calls(engine: sa.Engine, events: list[tuple[float, int]]) -> tuple[int, float]:
    """LLM calls and the longest wait (conversation → its update) with memory_sql's queue."""
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    queue = UpdateQueue(engine, debounce_seconds=DEBOUNCE, max_debounce_seconds=MAX_WAIT)
    calls, waits, waiting = 0, [], {}
    horizon = events[-1][0] + MAX_WAIT + 1

    def run_due(until: float) -> None:
        nonlocal calls
        while (due := queue.next_due(now=T0 + timedelta(seconds=until))) is not None:
            at = (due - T0).total_seconds()
            if at > until:
                return
            for item in queue.claim(10, now=due):
                calls += 1
                key = int(item.thread_id.split("-")[1])
                waits.extend(at - t for t in waiting.pop(key, []))
                queue.complete(item)

    for t, key in events:
        run_due(t)
        queue.add(
            Scope.of(user_id=f"user-{key}"),
            f"thread-{key}",
            CONVERSATION,
            Signals(),
            now=T0 + timedelta(seconds=t),
        )
        waiting.setdefault(key, []).append(t)
    run_due(horizon)
    return calls, max(waits)


def global_timer_calls(events: list[tuple[float, int]]) -> tuple[int, float]:
    """DeerFlow: one timer for everything, restarted by every conversation."""
    calls, waits, waiting = 0, [], {}
    for i, (t, key) in enumerate(events):
        waiting.setdefault(key, []).append(t)
        next_t = events[i + 1][0] if i + 1 < len(events) else float("inf")
        if next_t - t >= DEBOUNCE:  # the timer fires before the next conversation
            fired = t + DEBOUNCE
            calls += len(waiting)
            waits.extend(fired - s for times in waiting.values() for s in times)
            waiting.clear()
    return calls, max(waits)


THROUGHPUT_KEYS = 2000


def throughput(url: str) -> None:
    """Intake against the worker's drain, in one run (see the module docstring)."""
    import multiprocessing
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _workers import run_service_until_idle
    from llm_server import ScriptedLLM
    from test_service import chat, learn

    from memory_sql import MemoryConfig
    from memory_sql.service import MemoryService

    migrations.upgrade(url)
    first_call: list[float] = []

    def answer(body: dict) -> str:
        if not first_call:
            first_call.append(time.monotonic())
        return learn(body)

    with ScriptedLLM() as llm:
        llm.responder = answer
        config = MemoryConfig(
            storage=url,
            model_name="m",
            llm_base_url=llm.base_url,
            llm_api_key="k",
            debounce_seconds=0,
            token_counting=False,
        )
        with MemoryService(config, start=False) as service:

            def post(start: int) -> None:
                for n in range(start, THROUGHPUT_KEYS, 16):
                    service.after_agent(chat(f"tea{n}"), thread_id="t", user_id=f"u{n}")

            threads = [threading.Thread(target=post, args=(n,)) for n in range(16)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            intake = THROUGHPUT_KEYS / (time.perf_counter() - started)
        spawn = multiprocessing.get_context("spawn")
        results = spawn.Queue()
        settings = {"workers": 8, "debounce_seconds": 0, "token_counting": False}
        workers = [
            spawn.Process(
                target=run_service_until_idle, args=(url, llm.base_url, settings, results, 300)
            )
            for _ in range(2)
        ]
        for worker in workers:
            worker.start()
        engine = create_engine(url)
        while True:
            with engine.connect() as conn:
                left = conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar()
            if left == 0 or not any(w.is_alive() for w in workers):
                break
            time.sleep(0.05)
        ended = time.monotonic()
        engine.dispose()
        statuses = [results.get(timeout=60)[1] for _ in workers]
        for worker in workers:
            worker.join(30)
    done = sum(status["completed"] for status in statuses)
    rate = done / (ended - first_call[0]) if first_call else 0.0
    print(
        f"\nworker throughput against intake (PostgreSQL, {THROUGHPUT_KEYS} conversations of "
        f"as many users, an LLM that answers at once)"
    )
    print(f"  intake, 16 threads of after_agent        {intake:7.0f} conversations/s")
    print(f"  drain, 2 processes x 8 worker threads    {rate:7.0f} updates/s ({done} updates)")
    print(f"  drain / intake                            {rate / intake:7.2f}")


def main() -> None:
    if "--throughput-only" in sys.argv:
        with scratch_postgres() as pg:
            if pg is not None:
                throughput(pg)
        return
    with tempfile.TemporaryDirectory() as tmp, scratch_postgres() as pg:
        targets = {"sqlite": f"sqlite:///{tmp}/queue.db"}
        if pg is not None:
            targets["postgresql"] = pg
        print("enqueue latency (median of 400 adds; half new keys, half existing)")
        for name, url in targets.items():
            engine = create_engine(url)
            migrations.upgrade(engine)
            few = enqueue_latency(engine, 10)
            many = enqueue_latency(engine, 10_000)
            print(
                f"  {name:10} 10 pending: {fmt(few)}   10 000 pending: {fmt(many)}   "
                f"ratio {many / few:.2f}x"
            )
            if name == "sqlite":
                simulated = {
                    gaps: (per_key_calls(engine, traffic(gaps)), global_timer_calls(traffic(gaps)))
                    for gaps in ((5.0, 25.0), (10.0, 60.0))
                }
            engine.dispose()
    print(
        f"\nLLM calls for 100 conversations over 10 keys (debounce {DEBOUNCE:.0f} s, max wait "
        f"{MAX_WAIT:.0f} s); wait = longest time from a conversation to its update"
    )
    for (low, high), ((calls, longest), (deer_calls, deer_longest)) in simulated.items():
        print(f"  each key talking every {low:.0f}-{high:.0f} s:")
        print("    no debounce                  100 calls   wait    0 s")
        print(f"    DeerFlow global timer       {deer_calls:4d} calls   wait {deer_longest:4.0f} s")
        print(
            f"    memory_sql per-key debounce {calls:4d} calls   wait {longest:4.0f} s"
            f"   ({1 - calls / 100:.0%} fewer calls than no debounce)"
        )
    with scratch_postgres() as pg:
        if pg is not None:
            throughput(pg)


if __name__ == "__main__":
    main()
