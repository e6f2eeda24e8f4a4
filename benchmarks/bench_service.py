"""The HTTP service against the Python API, and row-level security on against off, on PostgreSQL.

    .venv/bin/python benchmarks/bench_service.py [--quick] [--requests N] [--rounds R]
    .venv/bin/python benchmarks/bench_service.py --pgbouncer [--quick] ...

It needs the server extra and httpx (pip install -e '.[dev,server]'; `make bench` has both).

Two fresh databases on the PostgreSQL server of ``MEMORY_SQL_TEST_PG_URL`` (default
127.0.0.1:5432, user postgres), both at the schema head, both seeded through memory_sql's storage
with the same memories (200 users x 30 facts, agent ``coder``, the users spread over four
tenants, so that pooled connections change tenant as requests of different tenants follow one
another, as in a multi-tenant deployment):

- **RLS on**: as migrated (row-level security enabled and forced on every memory table), the
  service connecting as a login role the benchmark makes, which owns nothing and has only what
  ``memory-sql db grant --apply`` gives it;
- **RLS off**: ``NO FORCE`` and ``DISABLE ROW LEVEL SECURITY`` on every memory table, the
  service connecting as the tables' owner.

On each, a real ``memory-sql serve --no-worker`` on a free 127.0.0.1 port (the worker off, so
what is measured is the API; its access log goes to a file, as deployed), and beside it the same
operations through the Python API in this process (``MemoryService(config, start=False)``:
``queue_conversation`` and ``memory_context``, the same role and database). Measured:
``POST /v1/conversations`` (a four-message conversation, the users and 10 threads each taken
round-robin, each side's threads its own: the same work on every side, a key's first
conversation an insert and a later one a merge) and
``GET /v1/users/{user}/context?agent_name=coder`` (the users round-robin), with 1, 8 and 32
concurrent clients: threads, one ``httpx.Client`` (keep-alive) each, released
together; for the Python API, threads sharing one service. The four sides take turns round by
round, so that a slower minute of the shared machine does not land on one side only.

Printed: the machine, one row per (operation, clients, side) with requests/s (the median of
the rounds) and p50/p99 latency (over every request), then the HTTP overhead (HTTP / Python, of
p50 latencies and of rates) and the cost of RLS (on / off, goal <= 1.1x). Every response is
checked: a non-2xx status, an empty context or a conversation not queued is an error, and so is
a queue that does not hold every conversation acknowledged; the exit status is 1 only then.
Both databases and the role are dropped at the end.

With ``--pgbouncer``: one database (RLS on, the service as the role), reached directly and
through a real PgBouncer 1.18 in transaction mode (``tests/pgbouncer.py``, pool size 20) by a
storage URL marked ``?pool_mode=transaction`` (``memory_sql.pooling``); the four sides are HTTP
and Python, each direct and through PgBouncer, in turn, and the ratios are PgBouncer / direct
(goal <= 1.3x).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import PG_URL, analyze, fmt, percentile, released_together, scratch_postgres

from memory_sql import Fact, MemoryConfig, MemoryDocument, MemoryService, migrations
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from memory_sql.storage import SQLStorage

try:
    import httpx
    from server.service_process import ServiceProcess
except ImportError as exc:
    sys.exit(
        f"bench_service needs httpx and the server extra (pip install -e '.[dev,server]'): {exc}"
    )

TENANTS = ("bench-a", "bench-b", "bench-c", "bench-d")
AGENT = "coder"
USERS = 200
FACTS = 30
THREADS_PER_USER = 10  # each side's conversations go to USERS x THREADS_PER_USER keys of its own
CONCURRENCY = (1, 8, 32)
CATEGORIES = ["preference", "knowledge", "context", "behavior", "goal", "correction"]
WORDS = [
    *("prefers", "concise", "answers", "uses", "python", "postgres", "rust", "typescript"),
    *("works", "on", "data", "pipelines", "video", "creation", "lives", "in", "berlin"),
    *("likes", "tea", "hates", "meetings", "building", "agents"),
]
CONVERSATION = [
    {
        "role": "user",
        "content": "I moved our deploys to pnpm last week; npm is gone for good. " * 3,
    },
    {"role": "assistant", "content": "Noted: pnpm for every deployment from now on. " * 3},
    {"role": "user", "content": "Also, keep answers short, I read them on my phone. " * 3},
    {"role": "assistant", "content": "Understood, short answers it is. " * 3},
]
ON, OFF = "RLS on", "RLS off"
DIRECT, BOUNCED = "direct", "pgbouncer"
HTTP, PYTHON = "HTTP", "Python"
POST, CONTEXT = "POST /v1/conversations", "GET /v1/users/{user}/context"


# the databases ---------------------------------------------------------------------------------


def admin_engine() -> sa.Engine:
    return sa.create_engine(make_url(PG_URL), isolation_level="AUTOCOMMIT")


def server_version() -> str:
    engine = admin_engine()
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SHOW server_version")).scalar())
    finally:
        engine.dispose()


@contextmanager
def login_role() -> Iterator[str]:
    """A login role that owns nothing (no superuser, no BYPASSRLS); dropped at the end, after
    the databases its grants are in (the caller's ExitStack drops those first)."""
    name = f"memory_sql_bench_app_{uuid.uuid4().hex[:8]}"
    engine = admin_engine()
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOBYPASSRLS'))
    try:
        yield name
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{name}"'))
        engine.dispose()


def as_role(url: str, role: str) -> str:
    return make_url(url).set(username=role, password=None).render_as_string(hide_password=False)


def memory_cli(*args: str) -> str:
    """``memory-sql ARGS`` of this interpreter's memory_sql; its stdout. Raises on failure."""
    done = subprocess.run(
        [sys.executable, "-m", "memory_sql", *args], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory-sql {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


def rls_tables(url: str) -> list[tuple[str, bool, bool]]:
    """(table, RLS enabled, RLS forced) of every table of the database's schema with RLS on."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class WHERE "
                    "relkind = 'r' AND relnamespace = current_schema()::regnamespace "
                    "AND (relrowsecurity OR relforcerowsecurity) ORDER BY relname"
                )
            )
            return [tuple(row) for row in rows]
    finally:
        engine.dispose()


def disable_rls(url: str, tables: list[str]) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for table in tables:
                conn.exec_driver_sql(f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY')
                conn.exec_driver_sql(f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY')
    finally:
        engine.dispose()


def seed(url: str) -> None:
    """USERS memories of FACTS facts each, the same in every database (a fixed sequence)."""
    storage = SQLStorage(create_engine(url))
    try:
        for u in range(USERS):
            facts = []
            for f in range(FACTS):
                n = u * FACTS + f
                words = " ".join(WORDS[(n * 7 + k * 3) % len(WORDS)] for k in range(6 + n % 10))
                facts.append(
                    Fact(
                        content=f"{words} (fact {n})",
                        category=CATEGORIES[n % len(CATEGORIES)],
                        confidence=0.7 + (n % 30) / 100,
                        source_thread_id=f"thread-{n % 50}",
                    )
                )
            storage.save(
                MemoryDocument(facts=facts),
                user_id=user(u),
                agent_name=AGENT,
                tenant_id=tenant(u),
            )
    finally:
        storage.close()
        storage.engine.dispose()


def pending_keys(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM memory_pending_updates WHERE tenant_id = ANY(:t)"
                    ),
                    {"t": list(TENANTS)},
                ).scalar()
                or 0
            )
    finally:
        engine.dispose()


def user(n: int) -> str:
    return f"user-{n % USERS:03d}"


def tenant(n: int) -> str:
    """The tenant of ``user(n)``: users round-robin over the tenants."""
    return TENANTS[(n % USERS) % len(TENANTS)]


# the service -----------------------------------------------------------------------------------


# the sides -------------------------------------------------------------------------------------


class Errors:
    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []
        self._lock = threading.Lock()

    def add(self, what: str) -> None:
        with self._lock:
            self.count += 1
            if len(self.first) < 5:
                self.first.append(what)


@dataclass
class Side:
    """One way of running the two operations on one database."""

    name: str  # e.g. "HTTP, RLS on"
    kind: str  # HTTP | PYTHON
    rls: str  # ON | OFF
    errors: Errors
    database: str  # which database's queue the conversations land in
    keys: set[tuple[str, str]] = field(default_factory=set)
    _counter: Iterator[int] = field(default_factory=itertools.count)

    def next_key(self) -> tuple[int, str]:
        """The next conversation's user (its number) and thread, round-robin over keys of this
        side's own: a key's first conversation is one insert, a later one a merge (three
        statements), so sides sharing keys would not do the same work."""
        n = next(self._counter)  # atomic under the GIL
        thread = f"{self.name}: thread-{(n // USERS) % THREADS_PER_USER}"
        self.keys.add((user(n), thread))
        return n, thread

    def worker(self, operation: str) -> tuple[Callable[[], None], Callable[[], None]]:
        """A (run one request, close) pair for one client thread."""
        raise NotImplementedError


class HttpSide(Side):
    base_url: str
    secrets: dict[str, str]  # tenant -> the secret of a write key of it
    process: ServiceProcess

    def worker(self, operation: str) -> tuple[Callable[[], None], Callable[[], None]]:
        client = httpx.Client(
            base_url=self.base_url,
            timeout=30.0,
        )
        auth = {t: {"Authorization": f"Bearer {s}"} for t, s in self.secrets.items()}
        reads = itertools.count(hash(threading.get_ident()) % USERS)
        if operation == POST:

            def run() -> None:
                n, thread = self.next_key()
                body = {
                    "user_id": user(n),
                    "agent_name": AGENT,
                    "thread_id": thread,
                    "messages": CONVERSATION,
                }
                response = client.post("/v1/conversations", json=body, headers=auth[tenant(n)])
                if response.status_code != 202:
                    self.errors.add(f"{self.name} POST: {response.status_code} {response.text}")

        else:

            def run() -> None:
                n = next(reads)
                response = client.get(
                    f"/v1/users/{user(n)}/context",
                    params={"agent_name": AGENT},
                    headers=auth[tenant(n)],
                )
                if response.status_code != 200 or not response.json().get("context"):
                    self.errors.add(f"{self.name} GET: {response.status_code} {response.text}")

        return run, client.close


class PythonSide(Side):
    service: MemoryService

    def worker(self, operation: str) -> tuple[Callable[[], None], Callable[[], None]]:
        reads = itertools.count(hash(threading.get_ident()) % USERS)
        service = self.service
        if operation == POST:

            def run() -> None:
                n, thread = self.next_key()
                ok = service.queue_conversation(
                    CONVERSATION,
                    thread_id=thread,
                    user_id=user(n),
                    agent_name=AGENT,
                    tenant_id=tenant(n),
                )
                if not ok:
                    self.errors.add(f"{self.name} queue_conversation: not queued")

        else:

            def run() -> None:
                n = next(reads)
                block = service.memory_context(
                    user_id=user(n), agent_name=AGENT, tenant_id=tenant(n)
                )
                if not block:
                    self.errors.add(f"{self.name} memory_context: empty")

        return run, lambda: None


# measuring -------------------------------------------------------------------------------------


def one_round(side: Side, operation: str, clients: int, requests: int) -> tuple[float, list[float]]:
    """``requests`` requests (at least 4 per client) from ``clients`` threads released
    together; (requests/s, the latency of each)."""
    per = max(4, -(-requests // clients))
    latencies: list[list[float]] = [[] for _ in range(clients)]

    def work(t: int) -> Callable[[], None]:
        run, close = side.worker(operation)
        try:
            run()  # a warm-up request: the connection is open before the clock starts
        except BaseException:
            close()
            raise

        def timed() -> None:
            mine = latencies[t]
            try:
                for _ in range(per):
                    start = time.perf_counter()
                    run()
                    mine.append(time.perf_counter() - start)
            finally:
                close()

        return timed

    elapsed = released_together(work, clients)
    flat = [x for mine in latencies for x in mine]
    return len(flat) / elapsed, flat


@dataclass
class Cell:
    rates: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def warm(side: Side) -> None:
    """Every user's context read once (untimed): the measured reads find the memories in the
    process's cache, as a running service does, and check their version (one PK read)."""
    run, close = side.worker(CONTEXT)
    try:
        for _ in range(USERS):
            run()
    finally:
        close()


def measure(sides: list[Side], requests: int, rounds: int) -> dict[tuple[str, int, str], Cell]:
    cells: dict[tuple[str, int, str], Cell] = {}
    for side in sides:
        warm(side)
    for operation in (POST, CONTEXT):
        for clients in CONCURRENCY:
            for _ in range(rounds):
                for side in sides:
                    rate, latencies = one_round(side, operation, clients, requests)
                    cell = cells.setdefault((operation, clients, side.name), Cell())
                    cell.rates.append(rate)
                    cell.latencies += latencies
    return cells


# report ----------------------------------------------------------------------------------------


def machine() -> str:
    return (
        f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), load average "
        f"{os.getloadavg()[0]:.2f} at the start; Python {platform.python_version()}; "
        f"PostgreSQL {server_version()} on 127.0.0.1; {platform.system()} {platform.machine()}"
    )


def print_cells(cells: dict[tuple[str, int, str], Cell], sides: list[Side]) -> None:
    """Every cell's rate and latency, operation by operation, side by side."""
    head = f"{'operation':30} {'clients':>7} {'side':18} {'requests/s':>11} {'p50':>11} {'p99':>11}"
    print("\n" + head)
    print("-" * len(head))
    for operation in (POST, CONTEXT):
        for clients in CONCURRENCY:
            for side in sides:
                c = cells[(operation, clients, side.name)]
                print(
                    f"{operation:30} {clients:>7} {side.name:18} {c.rate:>11,.0f}"
                    f" {fmt(c.p50):>11} {fmt(c.p99):>11}"
                )


def print_report(cells: dict[tuple[str, int, str], Cell], sides: list[Side]) -> None:
    print_cells(cells, sides)
    print("\nratios: p50 latency (and requests/s) of one side over the other")
    head = f"{'operation':30} {'clients':>7} {'HTTP / Python':>22} {'RLS on / off, HTTP':>22}"
    head += f" {'RLS on / off, Python':>22}"
    print(head)
    print("-" * len(head))
    worst_rls = 0.0
    for operation in (POST, CONTEXT):
        for clients in CONCURRENCY:

            def get(kind: str, rls: str, op: str = operation, n: int = clients) -> Cell:
                return cells[(op, n, f"{kind}, {rls}")]

            def pair(a: Cell, b: Cell) -> str:
                return f"{a.p50 / b.p50:.2f}x ({a.rate / b.rate:.2f}x)"

            rls_http = get(HTTP, ON).p50 / get(HTTP, OFF).p50
            worst_rls = max(worst_rls, rls_http)
            print(
                f"{operation:30} {clients:>7} {pair(get(HTTP, ON), get(PYTHON, ON)):>22}"
                f" {pair(get(HTTP, ON), get(HTTP, OFF)):>22}"
                f" {pair(get(PYTHON, ON), get(PYTHON, OFF)):>22}"
            )
    print(
        "  HTTP / Python: the service against the library in-process, both with RLS on (same"
        " database, same role); > 1: HTTP slower in latency, < 1 on the rates"
    )
    verdict = "PASS" if worst_rls <= 1.1 else "FAIL"
    print(
        f"  {verdict}  RLS cost through HTTP, worst p50 ratio {worst_rls:.2f}x (goal ≤ 1.1x;"
        " a target, not a failure)"
    )


def print_pgbouncer_report(cells: dict[tuple[str, int, str], Cell], sides: list[Side]) -> None:
    print_cells(cells, sides)
    print("\nratios: PgBouncer / direct, p50 latency (and requests/s)")
    head = f"{'operation':30} {'clients':>7} {'HTTP':>16} {'Python':>16}"
    print(head)
    print("-" * len(head))
    worst = 0.0
    for operation in (POST, CONTEXT):
        for clients in CONCURRENCY:

            def pair(kind: str, op: str = operation, n: int = clients) -> str:
                a, b = cells[(op, n, f"{kind}, {BOUNCED}")], cells[(op, n, f"{kind}, {DIRECT}")]
                return f"{a.p50 / b.p50:.2f}x ({a.rate / b.rate:.2f}x)"

            bounced = cells[(operation, clients, f"{HTTP}, {BOUNCED}")]
            direct = cells[(operation, clients, f"{HTTP}, {DIRECT}")]
            worst = max(worst, bounced.p50 / direct.p50)
            print(f"{operation:30} {clients:>7} {pair(HTTP):>16} {pair(PYTHON):>16}")
    verdict = "PASS" if worst <= 1.3 else "FAIL"
    print(
        f"  {verdict}  PgBouncer (transaction mode) through HTTP, worst p50 ratio {worst:.2f}x"
        " (goal ≤ 1.3x; a target, not a failure)"
    )


def pgbouncer_sides(
    stack: ExitStack, folder: Path, errors: Errors, role: str
) -> tuple[list[Side], dict[str, str]] | None:
    """The four sides of ``--pgbouncer`` on one database (RLS on), and its URL by side label."""
    from pgbouncer import PgBouncer

    url = stack.enter_context(scratch_postgres())
    if url is None:
        print("PostgreSQL: cannot create a database: skipped")
        return None
    migrations.upgrade(url)
    seed(url)
    memory_cli("db", "grant", "--role", role, "--apply", "--url", url)
    analyze(url)
    bouncer = stack.enter_context(PgBouncer(make_url(PG_URL), pool_size=20))
    bouncer.add_user(role)
    connect = {DIRECT: as_role(url, role), BOUNCED: bouncer.url(as_role(url, role))}
    print(
        f"one database, RLS on, the service as role {role}; {BOUNCED}: PgBouncer 1.18 on port"
        f" {bouncer.port}, pool_mode = transaction, default_pool_size = 20, the storage URL"
        " marked ?pool_mode=transaction"
    )
    engine = create_engine(url)
    stack.callback(engine.dispose)
    secrets = {t: create_key(engine, tenant_id=t, role="write")[1] for t in TENANTS}
    sides: list[Side] = []
    for label in (DIRECT, BOUNCED):
        service = ServiceProcess(folder, {"storage": connect[label]}, with_worker=False)
        stack.callback(service.stop)
        http = HttpSide(f"{HTTP}, {label}", HTTP, label, errors, "db")
        http.base_url, http.secrets, http.process = service.base_url, secrets, service
        library = MemoryService(MemoryConfig(storage=connect[label]), start=False)
        stack.callback(library.close)
        python = PythonSide(f"{PYTHON}, {label}", PYTHON, label, errors, "db")
        python.service = library
        sides += [http, python]
    return sides, {"db": url}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~30 s run (fewer requests)")
    parser.add_argument("--requests", type=int, help="requests per round and side (default 400)")
    parser.add_argument("--rounds", type=int, help="rounds per cell, sides in turn (default 3)")
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="direct against through PgBouncer in transaction mode (RLS on), instead of RLS",
    )
    args = parser.parse_args()
    requests = args.requests or (100 if args.quick else 400)
    rounds = args.rounds or (2 if args.quick else 3)
    if requests < 1 or rounds < 1:
        parser.error("--requests and --rounds must be at least 1")

    started = time.perf_counter()
    compared = "direct vs through PgBouncer" if args.pgbouncer else "RLS on vs off"
    print(
        f"memory_sql HTTP service vs the Python API, {compared}: {USERS} users x {FACTS} facts,"
        f" {requests} requests per round and side, {rounds} rounds, clients {CONCURRENCY}"
    )
    try:
        print(f"machine: {machine()}")
    except sa.exc.OperationalError as exc:
        print(f"PostgreSQL unreachable at {make_url(PG_URL).render_as_string()}: skipped ({exc})")
        return 0
    errors = Errors()
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_service_")))
        role = stack.enter_context(login_role())
        urls: dict[str, str] = {}
        if args.pgbouncer:
            made = pgbouncer_sides(stack, folder, errors, role)
            if made is None:
                return 0
            sides, urls = made
        for rls in () if args.pgbouncer else (ON, OFF):
            url = stack.enter_context(scratch_postgres())
            if url is None:
                print("PostgreSQL: cannot create a database: skipped")
                return 0
            migrations.upgrade(url)
            seed(url)
            urls[rls] = url
        if not args.pgbouncer:
            memory_cli("db", "grant", "--role", role, "--apply", "--url", urls[ON])
            tables = [name for name, _, _ in rls_tables(urls[OFF])]
            disable_rls(urls[OFF], tables)
            on = rls_tables(urls[ON])
            if rls_tables(urls[OFF]) or not on or not all(e and f for _, e, f in on):
                print(f"setup failed: RLS not as intended (on: {on})")
                return 1
            for url in urls.values():
                analyze(url)
            connect = {ON: as_role(urls[ON], role), OFF: urls[OFF]}
            print(
                f"RLS on: {len(on)} tables with RLS enabled and forced, the service as role {role}"
                f" (`memory-sql db grant --apply`); RLS off: disabled on the same {len(tables)}"
                " tables, the service as the owner (postgres)"
            )

            sides: list[Side] = []
            for rls in (ON, OFF):
                engine = create_engine(urls[rls])
                stack.callback(engine.dispose)
                secrets = {t: create_key(engine, tenant_id=t, role="write")[1] for t in TENANTS}
                service = ServiceProcess(folder, {"storage": connect[rls]}, with_worker=False)
                stack.callback(service.stop)
                http = HttpSide(f"{HTTP}, {rls}", HTTP, rls, errors, rls)
                http.base_url, http.secrets, http.process = service.base_url, secrets, service
                library = MemoryService(MemoryConfig(storage=connect[rls]), start=False)
                stack.callback(library.close)
                python = PythonSide(f"{PYTHON}, {rls}", PYTHON, rls, errors, rls)
                python.service = library
                sides += [http, python]
            # HTTP on, Python on, HTTP off…
            sides.sort(key=lambda s: (s.rls != ON, s.kind != HTTP))

        cells = measure(sides, requests, rounds)

        queued_ok = True
        for rls in urls:
            issued = set().union(*(s.keys for s in sides if s.database == rls))
            spooled = sum(s.service.status()["spooled"] for s in sides if isinstance(s, PythonSide))
            found = pending_keys(urls[rls])
            if found != len(issued) or spooled:
                queued_ok = False
                print(
                    f"FAILED: {rls}: {len(issued)} conversation keys acknowledged, {found} in the"
                    f" queue, {spooled} spooled"
                )
        if args.pgbouncer:
            print_pgbouncer_report(cells, sides)
        else:
            print_report(cells, sides)
        for s in sides:
            if isinstance(s, HttpSide) and "Traceback" in s.process.log:
                errors.add(f"{s.name}: a traceback in the service's log")
        print(
            f"\n{sum(len(c.latencies) for c in cells.values()):,} requests measured,"
            f" {errors.count} errors; {time.perf_counter() - started:.0f} s in all"
        )
    if errors.count or not queued_ok:
        for line in errors.first:
            print(f"  error: {line[:300]}")
        print("FAILED: requests answered with an error (see above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
