"""The durable queue: enqueue latency with 10 000 keys pending against 10, and the LLM calls
the per-key debounce saves, on the real queue table.

    .venv/bin/python benchmarks/bench_queue.py

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


def main() -> None:
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


if __name__ == "__main__":
    main()
