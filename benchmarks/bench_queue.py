"""The durable queue: enqueue latency with 10 000 keys pending against 10, the LLM calls
the per-key debounce saves, on the real queue table; and (PostgreSQL) the worker's throughput
against intake in the same run.

    .venv/bin/python benchmarks/bench_queue.py [--throughput-only | --wakeups-only | --notify-only]
    .venv/bin/python benchmarks/bench_queue.py [--round-trips] [--concurrent RUNS [--workers N]
                                                [--rate R] [--lean-llm]]

Throughput: 16 threads queue 2 000 conversations of 2 000 users (``after_agent``), timed:
intake per second. Then 2 worker processes × 8 threads (``memory-sql worker``'s service) drain
them through the scripted chat-completions server of ``tests/llm_server.py``, which answers at
once: updates per second from the first LLM call to the empty queue, and the ratio to intake.

``--concurrent RUNS`` measures intake and drain at the same time instead of one after the other:
2 worker processes of ``--workers N`` threads (8 by default) run while 16 threads queue 1 000
conversations; drain ÷ intake is the share learned by the time the last was queued, per run
(1.0: the worker keeps up). ``--round-trips`` counts the statements and commits the worker
sends per update (a SQLAlchemy event on the engine). ``--rate R`` paces the intake threads to
R conversations a second in all, to find the intake the drain keeps up with; ``--lean-llm``
answers through ``instant_llm.py`` (the tests' ``ScriptedLLM`` spends about 1 ms of CPU a call
on the cores the worker shares; the figures print the LLM's CPU apart either way).

Wake-ups (SQLite and PostgreSQL): posted → learned, the time from queueing a conversation in a
process that runs no updates (the API's side of the README's layout) to its memory's save,
minus the time it was due at (immediate: at once; debounced: 1 s later), for a separate
``memory-sql worker`` process (its sweep at the default 60 s, so only a wake-up explains
seconds) against the in-process worker of a service that queues them itself, in the same run.
Each arm's first update is a warm-up, not counted: a process's first update imports ``openai``
and builds its client (a second or more on a loaded machine), whoever woke it. Goals: p99 at
most 1 s above the due time on PostgreSQL, 2 s on SQLite. What the NOTIFY triggers cost an
enqueue: one add, and 16 threads adding, with the triggers enabled and disabled in turn.

LLM calls are counted on a simulated clock (every enqueue and claim takes an explicit ``now``),
so a two-hour day of traffic runs in seconds: 100 conversations over 10 keys, each key talking
every 10 to 60 s. Compared: no debounce (one call per conversation), DeerFlow's single global
timer (restarted by every conversation of any key; when it fires, every pending key is updated),
and memory_sql's per-key debounce with a maximum wait.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, fmt, named_url, scratch_postgres

from memory_sql import migrations
from memory_sql.config import QueueSettings
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
    queue = UpdateQueue(engine, QueueSettings(debounce_seconds=DEBOUNCE))
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
    queue = UpdateQueue(
        engine, QueueSettings(debounce_seconds=DEBOUNCE, max_debounce_seconds=MAX_WAIT)
    )
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


def serve_until_stopped(url, llm_base_url, workers, stop, ready, results) -> None:
    """A worker process for :func:`concurrent`: a MemoryService with ``workers`` threads,
    working until ``stop`` is set; reports ``(pid, status)``."""

    from memory_sql import MemoryConfig
    from memory_sql.service import MemoryService

    config = MemoryConfig(
        storage=url,
        model_name="m",
        llm_base_url=llm_base_url,
        llm_api_key="k",
        llm_max_retries=0,
        workers=workers,
        debounce_seconds=0,
        token_counting=False,
    )
    service = MemoryService(config)
    ready.put(os.getpid())
    try:
        stop.wait()
        status = {**service.status(), "claims": getattr(service.worker, "claims", 0)}
    finally:
        service.close(timeout=10)
    results.put((os.getpid(), status))


def serve_llm(stop, ready, lean: bool = False) -> None:
    """The scripted LLM in a process of its own for :func:`concurrent` (in the intake's
    process it would share that process's interpreter lock with the 16 intake threads):
    reports its base URL, answers until ``stop`` is set. ``lean``: the stand-in of
    ``instant_llm.py`` instead of the tests' ``ScriptedLLM``, the same replies."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from llm_server import ScriptedLLM
    from test_service import learn

    if lean:
        from instant_llm import serve

        serve(learn, ready, stop)
        return
    with ScriptedLLM() as llm:
        llm.responder = learn
        ready.put(llm.base_url)
        stop.wait()


CONCURRENT_KEYS = 1000


def concurrent(url: str, runs: int, workers: int, rate: int = 0, lean: bool = False) -> None:
    """Intake and drain measured at the same time: 2 worker processes of ``workers`` threads
    run while 16 threads of ``after_agent`` queue ``CONCURRENT_KEYS`` conversations of as many
    users, as fast as they can or (``rate``) paced to that many a second in all. Drain ÷
    intake is the share of those conversations learned (their rows completed) by the time
    the last was queued: 1.0 when the worker keeps up. ``runs`` rounds, the queue emptied
    between them. ``lean``: the LLM stand-in of ``instant_llm.py`` (``--lean-llm``)."""
    import multiprocessing
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_service import chat

    from memory_sql import MemoryConfig
    from memory_sql.service import MemoryService

    migrations.upgrade(url)
    engine = create_engine(url)

    def left() -> int:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar() or 0)

    def wait_empty(limit: float) -> float:
        started = time.monotonic()
        while left() and time.monotonic() - started < limit:
            time.sleep(0.02)
        return time.monotonic() - started

    pace = f"paced to {rate}/s in all" if rate else "as fast as they can"
    print(
        f"\nintake and drain at the same time (PostgreSQL; 16 threads of after_agent queue "
        f"{CONCURRENT_KEYS} conversations of as many users ({pace}) while 2 worker processes "
        f"x {workers} threads learn them; an LLM that answers at once: "
        f"{'instant_llm.py' if lean else 'ScriptedLLM of tests/llm_server.py'})"
    )
    spawn = multiprocessing.get_context("spawn")
    stop, ready, results = spawn.Event(), spawn.Queue(), spawn.Queue()
    llm_process = spawn.Process(target=serve_llm, args=(stop, ready, lean))
    llm_process.start()
    base_url = ready.get(timeout=120)
    config = MemoryConfig(
        storage=named_url(url, "bench-intake"),
        model_name="m",
        llm_base_url=base_url,
        llm_api_key="k",
        debounce_seconds=0,
        token_counting=False,
    )
    processes = [
        spawn.Process(
            target=serve_until_stopped,
            args=(named_url(url, "bench-worker"), base_url, workers, stop, ready, results),
        )
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    worker_pids = [ready.get(timeout=120) for _ in processes]

    def cpu() -> dict[str, float]:
        """CPU seconds so far of this process (the intake), the worker processes, the LLM's,
        and the PostgreSQL backends serving each side (by application_name)."""
        with engine.connect() as conn:
            backends = conn.execute(
                sa.text(
                    "SELECT pid, application_name FROM pg_stat_activity "
                    "WHERE datname = current_database()"
                )
            ).all()
        spent = {"intake": sum(os.times()[:2]), "worker": 0.0, "llm": cpu_seconds(llm_process.pid)}
        spent["worker"] = sum(cpu_seconds(pid) for pid in worker_pids)
        for pid, name in backends:
            side = {"bench-intake": "pg intake", "bench-worker": "pg worker"}.get(name)
            if side is not None:
                spent[side] = spent.get(side, 0.0) + cpu_seconds(pid)
        return spent

    ratios = []
    costs: list[dict[str, float]] = []
    with MemoryService(config, start=False) as service:
        for n in range(40):  # a warm-up: each process imports openai, builds its client
            service.after_agent(chat("tea"), thread_id="t", user_id=f"warm-{n}")
        wait_empty(120)
        for run in range(runs):

            def post(start: int, began: float, run: int = run) -> None:
                for n in range(start, CONCURRENT_KEYS, 16):
                    if rate:  # conversation n is queued n / rate seconds after the start
                        time.sleep(max(0.0, began + n / rate - time.monotonic()))
                    service.after_agent(chat(f"tea{n}"), thread_id="t", user_id=f"r{run}-{n}")

            before = cpu()
            started = time.monotonic()
            threads = [threading.Thread(target=post, args=(n, started)) for n in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            window = time.monotonic() - started
            queued = cpu()
            backlog = left()
            after = wait_empty(300)
            emptied = cpu()
            costs.append(
                {
                    side: 1000
                    * ((queued if "intake" in side else emptied).get(side, 0.0) - spent)
                    / CONCURRENT_KEYS
                    for side, spent in before.items()
                }
            )
            intake = CONCURRENT_KEYS / window
            drain = (CONCURRENT_KEYS - backlog) / window
            ratios.append(drain / intake)
            print(
                f"  run {run + 1}: intake {intake:6.0f}/s   drain {drain:6.0f}/s   "
                f"drain / intake {drain / intake:5.2f}   backlog {backlog:4d}, "
                f"emptied {after:5.2f} s later   load {_loadavg()}"
            )
    stop.set()
    statuses = [results.get(timeout=60)[1] for _ in processes]
    for process in [*processes, llm_process]:
        process.join(30)
    engine.dispose()
    done = sum(status["completed"] for status in statuses)
    claims = sum(status["claims"] for status in statuses)
    print(
        f"  drain / intake {min(ratios):.2f}-{max(ratios):.2f} over {runs} runs "
        f"({done} updates completed by the workers, {claims / max(done, 1):.2f} claims each)"
    )
    print("  CPU ms per conversation (median of the runs): queueing it, and learning it")
    median = {side: sorted(cost[side] for cost in costs)[len(costs) // 2] for side in costs[0]}
    taking = median["intake"] + median.get("pg intake", 0.0)
    learning = median["worker"] + median.get("pg worker", 0.0) + median["llm"]
    print(
        f"    intake process {median['intake']:5.2f} + its PostgreSQL backends "
        f"{median.get('pg intake', 0.0):5.2f} = {taking:5.2f}"
    )
    print(
        f"    worker processes {median['worker']:5.2f} + their PostgreSQL backends "
        f"{median.get('pg worker', 0.0):5.2f} + the LLM server {median['llm']:5.2f} "
        f"= {learning:5.2f}   ({learning / taking:.2f}x the intake's)"
    )


def round_trips(url: str, updates: int = 200) -> None:
    """Statements per update the worker sends (counted with SQLAlchemy's
    ``before_cursor_execute`` event on the service's engine, so the driver's fast path is off
    and every statement is seen), and the transactions they make, for one-turn conversations
    of distinct users through a service's own worker."""
    from collections import Counter

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from llm_server import ScriptedLLM
    from test_service import chat, learn

    from memory_sql import MemoryConfig
    from memory_sql.models import utcnow
    from memory_sql.service import MemoryService
    from memory_sql.storage.capabilities import sql_engine

    migrations.upgrade(url)
    with ScriptedLLM() as llm:
        llm.responder = learn
        config = MemoryConfig(
            storage=url,
            model_name="m",
            llm_base_url=llm.base_url,
            llm_api_key="k",
            debounce_seconds=3600,
            max_debounce_seconds=3600,
            token_counting=False,
            workers=2,
        )
        with MemoryService(config) as service:
            for n in range(10):  # a warm-up: the first update builds the client
                service.after_agent(chat("tea"), thread_id="t", user_id=f"rt-warm-{n}")
            service.flush(timeout=60)
            for n in range(updates):
                service.after_agent(chat(f"tea{n}"), thread_id="t", user_id=f"rt-{n}")
            service.spool.write()  # queued before the statements are counted
            engine = sql_engine(service.storage)
            assert engine is not None
            kinds: Counter[str] = Counter()

            def count(conn, cursor, statement, parameters, context, executemany) -> None:
                kinds[statement.split(None, 1)[0].upper()] += 1

            def commit(conn) -> None:
                kinds["COMMIT"] += 1

            sa.event.listen(engine, "before_cursor_execute", count)
            sa.event.listen(engine, "commit", commit)
            target = service.worker.completed + updates
            try:
                service.queue.make_all_due()
                service.worker.notify(utcnow())
                deadline = time.monotonic() + 120
                while service.worker.completed < target and time.monotonic() < deadline:
                    time.sleep(0.01)  # not service.flush(): its polls would be counted
            finally:
                sa.event.remove(engine, "before_cursor_execute", count)
                sa.event.remove(engine, "commit", commit)
    statements = sum(n for kind, n in kinds.items() if kind != "COMMIT")
    print(f"\nround trips per update (PostgreSQL, {updates} one-turn updates, the worker's own)")
    print(
        f"  statements {statements / updates:5.2f}   commits {kinds['COMMIT'] / updates:5.2f}   "
        f"({', '.join(f'{k} {v / updates:.2f}' for k, v in sorted(kinds.items()))})"
    )


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


WAKE_SAMPLES = {"immediate": 30, "debounced": 15}
WAKE_DEBOUNCE = 1.0
WAKE_GOALS = {"sqlite": 2.0, "postgresql": 1.0}


def wakeups(name: str, url: str) -> None:
    """Posted → learned above the due time, separate worker against in-process (see the module
    docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from llm_server import ScriptedLLM
    from test_service import chat, learn
    from worker_process import WorkerProcess

    from memory_sql import MemoryConfig
    from memory_sql.service import MemoryService

    migrations.upgrade(url)
    settings = {
        "storage": url,
        "model_name": "m",
        "llm_api_key": "k",
        "llm_max_retries": 0,
        "token_counting": False,
        "sweep_interval_seconds": 60.0,
        "workers": 2,
    }
    lateness: dict[tuple[str, str], list[float]] = {}
    rng = random.Random(5)
    with ScriptedLLM() as llm, tempfile.TemporaryDirectory() as folder:
        llm.responder = learn
        settings["llm_base_url"] = llm.base_url

        def measure(arm: str, start: bool) -> None:
            for mode, samples in WAKE_SAMPLES.items():
                debounce = WAKE_DEBOUNCE if mode == "debounced" else 0.0
                config = MemoryConfig(**settings, debounce_seconds=debounce)
                with MemoryService(config, start=start) as service:
                    late = lateness.setdefault((arm, mode), [])
                    for n in range(-1, samples):  # -1: a warm-up (a process's first update
                        # builds the LLM client and imports openai: seconds, once), not counted
                        user = f"{arm.split()[0]}-{mode}-{n}-{time.monotonic_ns()}"
                        time.sleep(rng.uniform(0.1, 0.4))  # an idle worker, any phase
                        posted = time.monotonic()
                        service.queue_conversation(
                            chat("tea"), thread_id="t", user_id=user, immediate=not debounce
                        )
                        while service.storage.load(user_id=user).version == 0:
                            if time.monotonic() - posted > 90:
                                raise RuntimeError(f"{arm}: {user} not learned in 90 s")
                            time.sleep(0.005)
                        if n >= 0:
                            late.append(time.monotonic() - posted - debounce)

        with WorkerProcess(Path(folder), settings):
            time.sleep(1.0)
            measure("separate worker", start=False)
        measure("in-process worker", start=True)
    goal = WAKE_GOALS[name]
    print(f"\n{name}: posted -> learned, seconds above the due time (p50 / p99)")
    for mode, samples in WAKE_SAMPLES.items():
        inner = _percentiles(lateness[("in-process worker", mode)])
        outer = _percentiles(lateness[("separate worker", mode)])
        passed = outer[1] <= goal
        print(
            f"  {mode:9} ({samples} each)  in-process {inner[0]:6.3f} / {inner[1]:6.3f}   "
            f"separate worker {outer[0]:6.3f} / {outer[1]:6.3f}   "
            f"p99 ratio {outer[1] / inner[1]:5.2f}x   goal p99 <= {goal:g} s: "
            f"{'PASS' if passed else 'FAIL'}"
        )


NOTIFY_TRIGGERS = ("memory_pending_updates_notify_insert", "memory_pending_updates_notify_update")


def notify_cost(url: str) -> None:
    """What revision 0013's NOTIFY triggers cost an enqueue on PostgreSQL: one add's median
    latency; 16 threads adding new keys at once (NOTIFY serialises the commits that send one);
    16 threads merging turns into keys already waiting (which notify nothing); with the
    triggers and with them disabled, alternating, 3 rounds each, in the same run."""
    import threading

    engine = create_engine(url, pool_size=20)
    migrations.upgrade(engine)
    queue = UpdateQueue(engine, QueueSettings(debounce_seconds=DEBOUNCE))
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}

    def concurrently(name: str) -> float:
        def adds(worker: int) -> None:
            for i in range(100):
                user = f"{name}-{worker}" if name.startswith("merge") else f"{name}-{worker}-{i}"
                queue.add(Scope.of(user_id=user), "t", CONVERSATION, Signals())

        threads = [threading.Thread(target=adds, args=(n,)) for n in range(16)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return 1600 / (time.perf_counter() - started)

    for round_number in range(6):
        enabled = round_number % 2 == 0
        with engine.begin() as conn:
            conn.execute(sa.delete(pending))
            for name in NOTIFY_TRIGGERS:
                state = "ENABLE" if enabled else "DISABLE"
                conn.exec_driver_sql(f"ALTER TABLE memory_pending_updates {state} TRIGGER {name}")
        times = []
        for i in range(200):
            start = time.perf_counter()
            queue.add(Scope.of(user_id=f"one-{round_number}-{i}"), "t", CONVERSATION, Signals())
            times.append(time.perf_counter() - start)
        times.sort()
        new_keys = concurrently(f"new-{round_number}")
        merges = concurrently(f"merge-{round_number}")
        results[enabled].append((times[len(times) // 2], new_keys, merges))
    with engine.begin() as conn:
        for name in NOTIFY_TRIGGERS:
            conn.exec_driver_sql(f"ALTER TABLE memory_pending_updates ENABLE TRIGGER {name}")
    engine.dispose()
    print("\nPostgreSQL enqueue with the NOTIFY triggers against without (3 rounds each, medians)")
    (on_add, on_new, on_merge), (off_add, off_new, off_merge) = (
        tuple(sorted(v)[1] for v in zip(*results[flag], strict=True)) for flag in (True, False)
    )
    print(
        f"  one add (a new key)        with {fmt(on_add)}   without {fmt(off_add)}   "
        f"ratio {on_add / off_add:.2f}x"
    )
    print(
        f"  16 threads adding new keys with {on_new:6.0f}/s  without {off_new:6.0f}/s  "
        f"ratio {on_new / off_new:.2f}x"
    )
    print(
        f"  16 threads merging turns   with {on_merge:6.0f}/s  without {off_merge:6.0f}/s  "
        f"ratio {on_merge / off_merge:.2f}x"
    )


def _option(name: str, default: int) -> int:
    """The integer after ``name`` on the command line (``default`` when absent or not one)."""
    if name in sys.argv:
        index = sys.argv.index(name) + 1
        if index < len(sys.argv) and sys.argv[index].isdigit():
            return int(sys.argv[index])
    return default


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    pick = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.99)]
    return pick[0], pick[1]


def main() -> None:
    if "--concurrent" in sys.argv or "--round-trips" in sys.argv:
        runs = _option("--concurrent", 3)
        workers = _option("--workers", 8)
        with scratch_postgres() as pg:
            if pg is None:
                print("no PostgreSQL: nothing measured")
                return
            if "--round-trips" in sys.argv:
                round_trips(pg)
            if "--concurrent" in sys.argv:
                concurrent(pg, runs, workers, _option("--rate", 0), "--lean-llm" in sys.argv)
        return
    if "--notify-only" in sys.argv:
        with scratch_postgres() as pg:
            if pg is not None:
                notify_cost(pg)
        return
    if "--wakeups-only" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp, scratch_postgres() as pg:
            wakeups("sqlite", f"sqlite:///{tmp}/wake.db")
            if pg is not None:
                wakeups("postgresql", pg)
        return
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
    with tempfile.TemporaryDirectory() as tmp, scratch_postgres() as pg:
        wakeups("sqlite", f"sqlite:///{tmp}/wake.db")
        if pg is not None:
            wakeups("postgresql", pg)
            notify_cost(pg)
            throughput(pg)


if __name__ == "__main__":
    main()
