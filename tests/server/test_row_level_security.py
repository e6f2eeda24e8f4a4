"""Row-level security (migration 0010) on a real PostgreSQL, as a real role that owns nothing
and is no superuser: the role ``memory-sql db grant --apply`` prepares for the HTTP service.

The database of each test is migrated by the superuser ``postgres`` (``own_pg_url``), who
bypasses row-level security; the role of the test's own (``app_role``) does not. Raw SQL
without any ``WHERE tenant_id`` shows that the policies, not the queries' filters, hide the
other tenant's rows; the service's engine, that the tenant acted for reaches each pooled
connection and does not outlive its checkout; a real ``memory-sql serve`` worker, that the
update queue still runs for every tenant under those policies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from llm_server import LABELS, ScriptedLLM, update_reply
from pg_roles import grant_service_role as _grant
from pg_roles import login_role as _role
from pg_roles import memory_sql_cli as _cli
from pg_sessions import wait_until_session_ends
from sqlalchemy.engine import URL, Engine, make_url

from memory_sql import migrations, ops
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from memory_sql.storage import SQLStorage
from memory_sql.storage.driver import DriverConnection
from memory_sql.tenancy import NO_TENANT, SETTING, acting_for
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

pytestmark = pytest.mark.postgres

TENANT_TABLES = ("memory_scopes", "memory_facts", "memory_fact_events")
REPORT_VIEW = "memory_report_categories"
SEEDED = {"A": {"alice": ["Works on billing", "Prefers Python"]}, "B": {"bob": ["Likes Rust"]}}
INSUFFICIENT_PRIVILEGE = "42501"


def _text(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@dataclass(frozen=True)
class AppRole:
    name: str
    url: str
    """Connects as the role (same host and database, trust auth)."""
    owner_url: str
    """Connects as the tables' owner (who migrated the database)."""


@pytest.fixture
def app_role(pg_server: URL, own_pg_url: str) -> Iterator[AppRole]:
    """A role of this test's own, granted what the service needs in ``own_pg_url``."""
    owner = make_url(own_pg_url)
    with _role(pg_server, owner, "memory_app") as name:
        _grant(name, own_pg_url)
        yield AppRole(name, _text(owner.set(username=name)), own_pg_url)


@pytest.fixture
def owner_engine(app_role: AppRole) -> Iterator[Engine]:
    engine = create_engine(app_role.owner_url)
    yield engine
    engine.dispose()


@pytest.fixture
def role_engine(app_role: AppRole) -> Iterator[Engine]:
    """Plain SQLAlchemy as the role: no tenant is set on its connections unless a test does."""
    engine = sa.create_engine(app_role.url)
    yield engine
    engine.dispose()


def _seed(owner_url: str) -> None:
    engine = create_engine(owner_url)
    storage = SQLStorage(engine)
    try:
        for tenant, users in SEEDED.items():
            for user, facts in users.items():
                for content in facts:
                    ops.add_fact(storage, content, user_id=user, tenant_id=tenant)
    finally:
        storage.close()
        engine.dispose()


@pytest.fixture
def seeded(app_role: AppRole, owner_engine: Engine) -> dict[str, dict[str, list[Any]]]:
    """Facts of tenants A and B, stored by the owner; returns each relation's rows per tenant
    as the owner (whom no policy holds) sees them."""
    _seed(app_role.owner_url)
    return _rows_by_tenant(owner_engine, (*TENANT_TABLES, REPORT_VIEW))


def _rows_by_tenant(engine: Engine, relations: tuple[str, ...]) -> dict[str, dict[str, list[Any]]]:
    found: dict[str, dict[str, list[Any]]] = {}
    with engine.connect() as conn:
        for relation in relations:
            by_tenant: dict[str, list[Any]] = {}
            for row in conn.exec_driver_sql(f"SELECT * FROM {relation}"):
                by_tenant.setdefault(row.tenant_id, []).append(tuple(row))
            found[relation] = by_tenant
    for relation, by_tenant in found.items():  # the tests below mean something only then
        assert set(by_tenant) == {"A", "B"}, (relation, by_tenant)
    return found


def _all_rows(conn: sa.Connection, relation: str) -> list[tuple[Any, ...]]:
    """Every row of ``relation`` the connection may see: deliberately no WHERE."""
    return [tuple(row) for row in conn.exec_driver_sql(f"SELECT * FROM {relation}")]


def _set_tenant(conn: sa.Connection, tenant: str) -> None:
    conn.execute(
        sa.text("SELECT set_config(:name, :tenant, true)"), {"name": SETTING, "tenant": tenant}
    )


# --- raw SQL as the role ------------------------------------------------------------------


@pytest.mark.parametrize("relation", TENANT_TABLES)
def test_an_unfiltered_select_sees_only_the_tenant_set(
    relation: str, role_engine: Engine, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    with role_engine.begin() as conn:
        _set_tenant(conn, "A")
        as_a = _all_rows(conn, relation)
    with role_engine.begin() as conn:
        _set_tenant(conn, "B")
        as_b = _all_rows(conn, relation)
    assert sorted(as_a) == sorted(seeded[relation]["A"])
    assert sorted(as_b) == sorted(seeded[relation]["B"])
    with role_engine.begin() as conn:  # the transaction-local setting is gone
        assert _all_rows(conn, relation) == []


def test_a_new_connection_without_the_setting_sees_nothing(
    app_role: AppRole, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    engine = sa.create_engine(app_role.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT current_setting(:n, true)"), {"n": SETTING}).scalar()
                is None
            )
            for relation in TENANT_TABLES:  # (the views: see the tests below)
                assert _all_rows(conn, relation) == [], relation
            # Nor does "is the setting empty" become a way in: '' is no tenant.
            _set_tenant(conn, "")
            assert _all_rows(conn, "memory_facts") == []
    finally:
        engine.dispose()


def test_writing_a_row_of_another_tenant_is_refused(
    role_engine: Engine, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    insert = sa.text(
        "INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version, created_at, "
        "updated_at) VALUES (:tenant, 'intruder', '', 1, now(), now())"
    )
    # The same row of the tenant acted for is accepted: only the tenant makes it wrong.
    with role_engine.connect() as conn, conn.begin() as transaction:
        _set_tenant(conn, "A")
        conn.execute(insert, {"tenant": "A"})
        transaction.rollback()
    with role_engine.connect() as conn, conn.begin():
        _set_tenant(conn, "A")
        with pytest.raises(sa.exc.ProgrammingError, match="row-level security policy"):
            conn.execute(insert, {"tenant": "B"})
    # Nor may one of A's rows be moved to B.
    with role_engine.connect() as conn, conn.begin():
        _set_tenant(conn, "A")
        with pytest.raises(sa.exc.ProgrammingError, match="row-level security policy"):
            conn.execute(sa.text("UPDATE memory_facts SET tenant_id = 'B', user_id = 'bob'"))
    # And with no tenant set, nothing is written.
    with (
        role_engine.connect() as conn,
        conn.begin(),
        pytest.raises(sa.exc.ProgrammingError, match="row-level security policy"),
    ):
        conn.execute(insert, {"tenant": "A"})


def test_a_report_view_shows_only_the_tenant_set_when_a_superuser_migrated(
    role_engine: Engine, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    with role_engine.begin() as conn:
        _set_tenant(conn, "A")
        as_a = _all_rows(conn, REPORT_VIEW)
    with role_engine.begin() as conn:
        without = _all_rows(conn, REPORT_VIEW)
    assert (sorted(as_a), without) == (sorted(seeded[REPORT_VIEW]["A"]), [])


def test_a_report_view_shows_only_the_tenant_set_when_a_plain_owner_migrated(
    pg_server: URL, new_pg_database: Callable[[], URL]
) -> None:
    """The deployment the views are right in: the tables and views belong to a role that is
    no superuser, which FORCE ROW LEVEL SECURITY holds like any other."""
    database = new_pg_database()
    with _role(pg_server, database, "memory_owner") as owner:
        superuser = sa.create_engine(database, isolation_level="AUTOCOMMIT")
        with superuser.connect() as conn:
            conn.exec_driver_sql(f'ALTER SCHEMA public OWNER TO "{owner}"')
        superuser.dispose()
        owner_url = _text(database.set(username=owner))
        engine = create_engine(owner_url)
        migrations.upgrade(engine)
        _seed(owner_url)
        owner_sees = _rows_by_tenant(engine, (REPORT_VIEW,))[REPORT_VIEW]  # setting '*'
        engine.dispose()
        with _role(pg_server, database, "memory_app") as app:
            _grant(app, owner_url)
            role_engine = sa.create_engine(database.set(username=app))
            try:
                with role_engine.begin() as conn:
                    _set_tenant(conn, "A")
                    as_a = _all_rows(conn, REPORT_VIEW)
                with role_engine.begin() as conn:
                    without = _all_rows(conn, REPORT_VIEW)
            finally:
                role_engine.dispose()
    assert sorted(as_a) == sorted(owner_sees["A"])
    assert without == []


# --- the service's engine -------------------------------------------------------------------


def test_the_service_engine_sets_the_tenant_acted_for_on_each_checkout(
    app_role: AppRole, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    engine = create_engine(app_role.url, tenant_default=NO_TENANT, pool_size=1, max_overflow=0)

    def look() -> tuple[int, list[str]]:
        with engine.connect() as conn:
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            rows = conn.execute(sa.text("SELECT * FROM memory_facts")).mappings().all()
        return pid, sorted(row["tenant_id"] for row in rows)

    facts_of = {tenant: [tenant] * len(rows) for tenant, rows in seeded["memory_facts"].items()}
    try:
        with acting_for("A"):
            first, as_a = look()
        with acting_for("B"):
            second, as_b = look()
        third, outside = look()
        with acting_for("A"):
            fourth, again_a = look()
            # A transaction that fails and rolls back does not undo the tenant's setting…
            with pytest.raises(sa.exc.DBAPIError), engine.begin() as conn:
                conn.execute(sa.text("INSERT INTO memory_scopes (tenant_id) VALUES ('B')"))
            fifth, after_rollback = look()
        # …nor does it leak out of the block.
        sixth, outside_again = look()
    finally:
        engine.dispose()
    assert as_a == facts_of["A"]
    assert as_b == facts_of["B"]
    assert outside == []
    assert again_a == facts_of["A"]
    assert after_rollback == facts_of["A"]
    assert outside_again == []
    # One pooled connection served them all: the setting was rewritten, not a new connection.
    assert first == second == third == fourth == fifth == sixth


def test_a_pooled_connection_killed_under_the_tenant_hook_is_replaced(
    app_role: AppRole, owner_engine: Engine, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    """The hook's own statement is the first to meet a connection the server dropped: the pool
    takes a new one instead of failing the caller's call."""
    engine = create_engine(app_role.url, tenant_default=NO_TENANT, pool_size=1, max_overflow=0)
    try:
        with acting_for("A"), engine.connect() as conn:
            first = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        with owner_engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": first}).scalar()
        with acting_for("B"), engine.connect() as conn:  # the hook writes "B" first: it fails
            second = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            rows = conn.execute(sa.text("SELECT tenant_id FROM memory_facts")).scalars().all()
    finally:
        engine.dispose()
    assert second != first
    assert rows == ["B"] * len(seeded["memory_facts"]["B"])


def test_the_service_engine_sets_the_tenant_inside_a_transaction_too(
    app_role: AppRole, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    engine = create_engine(app_role.url, tenant_default=NO_TENANT, pool_size=1, max_overflow=0)
    try:
        with acting_for("B"), engine.begin() as conn:
            rows = conn.execute(sa.text("SELECT tenant_id FROM memory_fact_events")).scalars().all()
        with engine.begin() as conn:
            none = conn.execute(sa.text("SELECT tenant_id FROM memory_fact_events")).all()
    finally:
        engine.dispose()
    assert rows == ["B"] * len(seeded["memory_fact_events"]["B"])
    assert none == []


def test_a_connection_the_driver_keeps_idle_is_set_to_each_tenant_acted_for(
    app_role: AppRole, owner_engine: Engine, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    """The storage's fast path keeps a connection between calls, past the pool's checkout
    hook: each use still sees only the tenant acted for, and the engine's dispose closes it."""
    engine = create_engine(app_role.url, tenant_default=NO_TENANT, pool_size=2, max_overflow=0)
    checkouts: list[object] = []
    sa.event.listen(engine, "checkout", lambda *_: checkouts.append(1))

    def look() -> tuple[int, list[str]]:
        with DriverConnection(engine) as dbapi:
            ((pid, tenants),) = dbapi.execute(
                "SELECT pg_backend_pid(), array(SELECT tenant_id FROM memory_facts ORDER BY 1)"
            ).fetchall()
        return pid, list(tenants)

    facts_of = {tenant: [tenant] * len(rows) for tenant, rows in seeded["memory_facts"].items()}
    try:
        with acting_for("A"):
            first, as_a = look()
        with acting_for("B"):
            second, as_b = look()
        third, outside = look()
        with acting_for("A"):
            fourth, again_a = look()
    finally:
        engine.dispose()
    assert (as_a, as_b, outside, again_a) == (facts_of["A"], facts_of["B"], [], facts_of["A"])
    # One connection served all four, checked out of the pool (its hook run) only once: the
    # tenants of the other three were written by the reuse itself.
    assert first == second == third == fourth
    assert len(checkouts) == 1
    wait_until_session_ends(owner_engine, first, "the connection kept past dispose()")


def test_the_running_service_state_sees_only_the_tenant_it_acts_for(
    app_role: AppRole, seeded: dict[str, dict[str, list[Any]]]
) -> None:
    """The service's own pool, as ``memory-sql serve`` builds it (ServerState.open), after it
    served a request of each tenant: a deliberately unfiltered SELECT sees only the tenant a
    caller acts for, and nothing outside any."""
    from memory_sql import MemoryConfig
    from memory_sql.server.auth import Caller
    from memory_sql.server.keys import ApiKey
    from memory_sql.server.metrics import Metrics
    from memory_sql.server.state import ServerState

    state = ServerState.open(MemoryConfig(storage=app_role.url), Metrics(), with_worker=False)
    callers = {
        tenant: Caller(ApiKey(f"k{tenant}", tenant, "read", None, None, None, None), tenant)
        for tenant in ("A", "B")
    }

    def unfiltered() -> list[str]:
        with state.engine.connect() as conn:
            return sorted(conn.execute(sa.text("SELECT tenant_id FROM memory_facts")).scalars())

    try:
        for tenant, caller in callers.items():  # a request of each: the routes' own path
            (user, contents), *_ = SEEDED[tenant].items()
            with caller.acting():
                loaded = state.storage.load(user_id=user, tenant_id=tenant)
            assert sorted(f.content for f in loaded.facts) == sorted(contents)
        seen = {}
        for tenant, caller in callers.items():
            with caller.acting():
                seen[tenant] = unfiltered()
        outside = unfiltered()
    finally:
        state.close()
    for tenant in callers:
        assert seen[tenant] == [tenant] * len(seeded["memory_facts"][tenant])
    assert outside == []


# --- what the role may not do ---------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE alembic_version SET version_num = '0001'",
        "INSERT INTO memory_api_keys (key_id, tenant_id, role, secret_sha256, created_at) "
        "VALUES ('0123456789abcdef', 'A', 'admin', repeat('0', 64), now())",
        "UPDATE memory_api_keys SET tenant_id = '_operator', role = 'admin'",
        "DELETE FROM memory_api_keys",
        "CREATE TABLE memory_intruder (x int)",
        "ALTER TABLE memory_facts DISABLE ROW LEVEL SECURITY",
        "DROP POLICY memory_tenant ON memory_facts",
    ],
)
def test_the_role_cannot_change_what_it_must_not(role_engine: Engine, statement: str) -> None:
    with role_engine.connect() as conn, conn.begin():
        _set_tenant(conn, "*")
        with pytest.raises(sa.exc.DBAPIError) as refused:
            conn.exec_driver_sql(statement)
    assert refused.value.orig.sqlstate == INSUFFICIENT_PRIVILEGE, refused.value
    assert "permission denied" in str(refused.value) or "must be owner" in str(refused.value)


def test_the_role_can_do_what_the_service_needs(role_engine: Engine, owner_engine: Engine) -> None:
    key, _secret = create_key(owner_engine, tenant_id="A", role="read")
    with role_engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == (
            migrations.head_revision()
        )
        conn.execute(
            sa.text("UPDATE memory_api_keys SET last_used_at = now() WHERE key_id = :id"),
            {"id": key.key_id},
        )
    with owner_engine.connect() as conn:
        used = conn.execute(
            sa.text("SELECT last_used_at FROM memory_api_keys WHERE key_id = :id"),
            {"id": key.key_id},
        ).scalar()
    assert used is not None


# --- memory-sql db grant --------------------------------------------------------------------


def test_db_grant_refuses_a_superuser(own_pg_url: str) -> None:
    done = _cli("db", "grant", "--role", "postgres", "--apply", "--url", own_pg_url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "superuser" in done.stderr and "BYPASSRLS" in done.stderr, done.stderr
    assert "GRANT" not in done.stdout


def test_db_grant_prints_the_statements_without_apply(pg_server: URL, own_pg_url: str) -> None:
    owner = make_url(own_pg_url)
    with _role(pg_server, owner, "memory_app") as name:
        done = _cli("db", "grant", "--role", name, "--url", own_pg_url)
        assert done.returncode == 0, done.stdout + done.stderr
        statements = [line for line in done.stdout.splitlines() if line.strip()]
        assert statements and all(
            line.startswith("GRANT ") and line.endswith(";") for line in statements
        )
        assert any("memory_facts" in line and f"TO {name};" in line for line in statements)
        assert "granted" not in done.stdout
        # Printed, not run: the role still may not read a memory table.
        engine = sa.create_engine(owner.set(username=name))
        try:
            with (
                engine.connect() as conn,
                pytest.raises(sa.exc.ProgrammingError, match="permission denied"),
            ):
                conn.exec_driver_sql("SELECT * FROM memory_facts")
        finally:
            engine.dispose()


def test_db_grant_on_sqlite_names_postgresql(sqlite_url: str) -> None:
    for args in ((), ("--apply",)):
        done = _cli("db", "grant", "--role", "memory_app", *args, "--url", sqlite_url)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "PostgreSQL" in done.stderr, done.stderr
        assert "GRANT" not in done.stdout


# --- the worker under row-level security ----------------------------------------------------

LEARNED = {"A": "Works at Alpha Corp", "B": "Works at Beta Corp"}
USERS = {"A": "alice", "B": "bob"}


def _learn(body: dict[str, Any]) -> str:
    """The scripted LLM: the fact of the tenant whose conversation the prompt carries."""
    prompt = json.dumps(body)
    facts = [
        {"content": fact, "category": "context", "confidence": 0.95, **LABELS}
        for tenant, fact in LEARNED.items()
        if f"I am {USERS[tenant]}" in prompt
    ]
    return json.dumps(update_reply(newFacts=facts, user={}))


def _poll(check: Callable[[], Any], seconds: float, what: str, log: Callable[[], str]) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {seconds} s; service log:\n{log()}")
        time.sleep(0.1)


def test_the_worker_updates_each_tenant_under_row_level_security(
    tmp_path: Path, app_role: AppRole, owner_engine: Engine, llm: ScriptedLLM
) -> None:
    llm.responder = _learn
    keys = {
        tenant: create_key(owner_engine, tenant_id=tenant, role="write")[1] for tenant in LEARNED
    }
    settings = {**service_settings_for(llm), "storage": app_role.url}
    with ServiceProcess(tmp_path, settings, with_worker=True) as service:
        clients = {tenant: service.client(key) for tenant, key in keys.items()}
        try:
            for tenant, client in clients.items():
                user = USERS[tenant]
                sent = client.post(
                    "/v1/conversations",
                    json={
                        "user_id": user,
                        "thread_id": f"thread-{tenant}",
                        "messages": [
                            {"role": "user", "content": f"Hello, I am {user}."},
                            {"role": "assistant", "content": f"Nice to meet you, {user}."},
                        ],
                    },
                )
                assert sent.status_code == 202, sent.text

            def facts(tenant: str, user: str) -> httpx.Response:
                return clients[tenant].get(f"/v1/users/{user}/facts")

            def learned(tenant: str) -> list[str] | None:
                answer = facts(tenant, USERS[tenant])
                if answer.status_code == 404:
                    return None
                assert answer.status_code == 200, answer.text
                return [fact["content"] for fact in answer.json()["facts"]] or None

            for tenant in LEARNED:
                seen = _poll(
                    lambda tenant=tenant: learned(tenant),
                    20,
                    f"no fact of tenant {tenant}",
                    lambda: service.log,
                )
                assert seen == [LEARNED[tenant]]
            assert facts("A", USERS["B"]).status_code == 404
            assert facts("B", USERS["A"]).status_code == 404

            def queue_empty(tenant: str) -> dict[str, Any] | None:
                answer = clients[tenant].get("/v1/queue")
                assert answer.status_code == 200, answer.text
                body = answer.json()
                empty = body["counts"] == {"pending": 0, "failed": 0, "leased": 0, "due": 0}
                return body if empty and body["updates"] == [] else None

            for tenant in LEARNED:
                _poll(
                    lambda tenant=tenant: queue_empty(tenant),
                    5,
                    f"tenant {tenant}'s queue not empty",
                    lambda: service.log,
                )
        finally:
            for client in clients.values():
                client.close()
    with owner_engine.connect() as conn:
        stored = set(
            conn.execute(sa.text("SELECT tenant_id, user_id, content FROM memory_facts")).all()
        )
        queued = conn.execute(
            sa.text("SELECT tenant_id, user_id, status FROM memory_pending_updates")
        ).all()
        calls = (
            conn.execute(sa.text("SELECT DISTINCT tenant_id FROM memory_llm_calls")).scalars().all()
        )
    assert stored == {(tenant, USERS[tenant], fact) for tenant, fact in LEARNED.items()}
    assert queued == []  # as the owner, whom no policy hides a row from
    assert sorted(calls) == ["A", "B"]


def test_readyz_is_503_while_the_database_refuses_the_service(
    tmp_path: Path, app_role: AppRole, owner_engine: Engine
) -> None:
    """A database that answers and refuses (the role's grant on the schema's revision taken
    away) is no outage to spool through: not ready, though the spool has room, until the grant
    is back; the answer names no table, role or host."""
    settings = {"storage": app_role.url, "spool_dir": str(tmp_path / "spool")}
    with ServiceProcess(tmp_path, settings, with_worker=False) as service, service.client() as http:
        assert http.get("/readyz").status_code == 200
        with owner_engine.begin() as conn:
            conn.exec_driver_sql(f'REVOKE SELECT ON alembic_version FROM "{app_role.name}"')
        refused = http.get("/readyz")
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "database_refused"
        for leak in ("alembic_version", app_role.name, "127.0.0.1", "permission denied"):
            assert leak not in refused.text
        assert "permission denied" in service.log
        assert http.get("/healthz").status_code == 200
        with owner_engine.begin() as conn:
            conn.exec_driver_sql(f'GRANT SELECT ON alembic_version TO "{app_role.name}"')
        assert http.get("/readyz").status_code == 200
        assert "Traceback" not in service.log
