"""Timing helpers shared by the benchmarks: medians of repeated rounds, a PostgreSQL
database made for one run and dropped after it, its statistics, and which memory_sql a run
measured."""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

import memory_sql
from memory_sql.database import create_engine

PG_URL = os.environ.get(
    "MEMORY_SQL_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def median_seconds(run: Callable[[], object], *, repeat: int = 7, number: int = 50) -> float:
    """Median over ``repeat`` rounds of the mean time of one call in a round of ``number``."""
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            run()
        rounds.append((time.perf_counter() - start) / number)
    return statistics.median(rounds)


@contextmanager
def steady_cpus(hold: bool = True) -> Iterator[str]:
    """Keep the CPUs out of deep idle states for the block (``/dev/cpu_dma_latency`` held at
    0 µs, as latency benchmarks and tuned's latency-performance profile do), where the
    process may; yields what was done, to print with the figures.

    On this kind of machine (a VM guest, ``haltpoll`` idle driver) waking an idle CPU adds
    ~30 µs to a loopback round trip, on some connections and not others as the scheduler
    places their server processes: figures then come out bimodal from one run to the next."""
    driver = _read("/sys/devices/system/cpu/cpuidle/current_driver") or "unknown"
    if not hold:
        yield f"CPU idle states left as they are (idle driver {driver})"
        return
    try:
        latency = open("/dev/cpu_dma_latency", "wb", buffering=0)  # noqa: SIM115
    except OSError as exc:
        yield f"CPU idle states left as they are ({exc.strerror}; idle driver {driver})"
        return
    with latency:
        latency.write((0).to_bytes(4, "little"))
        yield (
            "CPUs kept out of deep idle states: /dev/cpu_dma_latency held at 0"
            f" (idle driver {driver})"
        )


def _read(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return None


def released_together(work: Callable[[int], Callable[[], object]], threads: int) -> float:
    """Seconds for ``threads`` threads to finish; ``work(t)`` prepares thread ``t`` (untimed,
    warm-up included) and returns what it then runs, all threads released together. The
    first exception of any thread is raised once all have ended."""
    ready = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def thread(t: int) -> None:
        try:
            run = work(t)
        except BaseException as exc:
            errors.append(exc)
            ready.abort()
            return
        try:
            ready.wait()
            run()
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=thread, args=(t,), daemon=True) for t in range(threads)]
    for t in pool:
        t.start()
    with suppress(threading.BrokenBarrierError):
        ready.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds * 1e6:8.1f} µs"


@contextmanager
def scratch_postgres() -> Iterator[str | None]:
    """A fresh database on the PostgreSQL server, or None if the server is unreachable."""
    server = make_url(PG_URL)
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    name = f"memory_sql_bench_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError:
        admin.dispose()
        yield None
        return
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def time_calls(
    run: Callable[[], object], *, number: int, after: Callable[[], object] | None = None
) -> list[float]:
    """The time of each of ``number`` calls of ``run``; ``after`` (untimed) follows each."""
    times = []
    for _ in range(number):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        if after is not None:
            after()
    return times


def percentile(times: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``times``, interpolated between the nearest ranks."""
    ordered = sorted(times)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def libpq_url(url: str) -> str:
    """A SQLAlchemy ``postgresql+psycopg://`` URL as the bare driver (psycopg, libpq) takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def analyze(url: str) -> None:
    """``ANALYZE`` the database at ``url``, so its planner knows the tables just filled."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()


def measured_source() -> str:
    """Which memory_sql this run measures: its folder, and its git commit and local changes."""
    folder = Path(memory_sql.__file__).resolve().parent
    git = ["git", "-C", str(folder)]
    try:
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return str(folder)
    state = f"{len(changed)} files changed since" if changed else "clean at"
    return f"{folder} ({state} {commit})"


def named_url(url: str, application_name: str) -> str:
    """``url`` with its connections' ``application_name`` set (seen in pg_stat_activity)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={application_name}"


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user and system) process ``pid`` has used, 0.0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
