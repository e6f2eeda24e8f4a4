"""memory_sql through a real PgBouncer 1.18 in transaction-pooling mode (``tests/pgbouncer.py``):
storage, the service and its worker, the CLI; row-level security still isolates tenants when
consecutive transactions of one client run on different server sessions; no prepared statement
is ever missing; the queue's LISTEN goes to the direct URL (``listen_url``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from llm_server import llm_config
from pg_roles import grant_service_role, login_role, memory_sql_cli
from sqlalchemy.engine import URL, make_url
from test_service import chat, learn

from memory_sql import MemoryConfig, pooling, tenancy
from memory_sql.database import create_engine
from memory_sql.models import Fact, MemoryDocument, utcnow
from memory_sql.server.keys import KeyChecker, create_key
from memory_sql.service import MemoryService
from memory_sql.storage import SQLStorage, api_keys, open_storage
from memory_sql.storage.wakeups import NotifyListener

pytestmark = pytest.mark.postgres


def _raw(url: str) -> str:
    """A psycopg conninfo of a SQLAlchemy URL (the pooling marker dropped)."""
    parsed = make_url(url).difference_update_query([pooling.MARKER]).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


@pytest.fixture
def bounced(pgbouncer: Any, own_pg_url: str) -> str:
    """``own_pg_url`` through PgBouncer, marked ``?pool_mode=transaction``."""
    url: str = pgbouncer.url(own_pg_url)
    return url


def _server_pids(url: str) -> set[int]:
    with psycopg.connect(_raw(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchall()
    return {row[0] for row in rows}


def test_the_marker_is_removed_and_nothing_is_set_on_the_session(
    bounced: str, own_pg_url: str
) -> None:
    engine = create_engine(bounced)
    try:
        assert pooling.is_pooled(engine)
        assert pooling.MARKER not in engine.url.query
        assert engine.url.port != make_url(own_pg_url).port  # through PgBouncer
        with tenancy.acting_for("acme"), engine.connect() as conn:
            seen = conn.execute(
                sa.text(
                    "SELECT current_setting('memory_sql.tenant_id', true), "
                    "current_setting('statement_timeout'), current_setting('TimeZone')"
                )
            ).one()
        assert tuple(seen) == ("acme", "30s", "UTC")
    finally:
        engine.dispose()
    # What was set lived for its transaction only: the next client of PgBouncer's server
    # sessions finds none of it.
    with psycopg.connect(_raw(bounced), autocommit=True, prepare_threshold=None) as conn:
        for _ in range(5):
            value = conn.execute("SELECT current_setting('memory_sql.tenant_id', true)").fetchone()
            assert value is not None and value[0] in (None, "")


def test_a_direct_engine_is_not_pooled(own_pg_url: str) -> None:
    engine = create_engine(own_pg_url)
    try:
        assert not pooling.is_pooled(engine)
        assert pooling.listen_url_of(engine) == ""
    finally:
        engine.dispose()
    with pytest.raises(ValueError, match="pool_mode"):
        create_engine(own_pg_url + "?pool_mode=statement")


def test_many_threads_on_two_server_sessions_never_miss_a_prepared_statement(
    pg_server: URL, own_pg_url: str
) -> None:
    """More threads than PgBouncer's server sessions, each statement run far past psycopg's
    prepare threshold: with prepared statements, one would be missing on another session."""
    from pgbouncer import PgBouncer

    with PgBouncer(pg_server, pool_size=2) as narrow:
        storage = open_storage(narrow.url(own_pg_url))
        errors: list[BaseException] = []
        try:
            doc = MemoryDocument()
            doc.facts.append(Fact(content="Likes tea", category="preference", confidence=0.9))
            storage.save(doc, user_id="shared", expected_version=0)

            def work(n: int) -> None:
                try:
                    for i in range(40):
                        assert storage.load(user_id="shared").version == 1
                        if i % 10 == 0:
                            own = storage.load(user_id=f"u{n}")
                            own.facts.append(
                                Fact(content=f"Fact {n}-{i}", category="context", confidence=0.9)
                            )
                            storage.save(own, user_id=f"u{n}", expected_version=own.version)
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            assert [len(storage.load(user_id=f"u{n}").facts) for n in range(8)] == [4] * 8
            with storage.engine.connect() as conn:
                prepared = conn.execute(sa.text("SELECT count(*) FROM pg_prepared_statements"))
                assert prepared.scalar_one() == 0
                # A threshold set afterwards (a setting, a connect hook) is not applied.
                dbapi = conn.connection.driver_connection
                dbapi.prepare_threshold = 0
                assert dbapi.prepare_threshold is None
        finally:
            storage.close()


def test_a_queued_conversation_is_two_messages_and_a_cached_read_one(
    pgbouncer: Any, bounced: str
) -> None:
    """Round trips through PgBouncer, counted by PgBouncer: a conversation queued is one
    transaction of two messages (BEGIN, the settings and the upsert in one; COMMIT), where a
    direct connection takes three; a read of a cached memory is one message."""
    service = MemoryService(MemoryConfig(storage=bounced), start=False)
    database = make_url(bounced).database or ""
    conversation = chat("tea")

    def measured(call: Any, times: int = 20) -> tuple[float, float]:
        time.sleep(1.5)  # PgBouncer's totals move every second (stats_period = 1)
        xacts, queries = pgbouncer.counts(database)
        for n in range(times):
            call(n)
        time.sleep(1.5)
        after = pgbouncer.counts(database)
        return (after[0] - xacts) / times, (after[1] - queries) / times

    try:
        for n in range(4):  # every tenant's first use, and the cache filled
            service.queue_conversation(conversation, thread_id="w", user_id=f"u{n}")
            service.memory_context(user_id=f"u{n}", tenant_id=f"t{n % 2}")
        queued = measured(
            lambda n: service.queue_conversation(
                conversation, thread_id=f"t{n}", user_id=f"u{n % 4}", tenant_id=f"t{n % 2}"
            )
        )
        read = measured(lambda n: service.memory_context(user_id=f"u{n % 4}", tenant_id="t0"))
    finally:
        service.close()
    assert queued == (1.0, 2.0)
    assert read == (1.0, 1.0)


def test_an_api_key_check_is_one_message(pgbouncer: Any, bounced: str) -> None:
    """The service's key lookup, its revocation check and its last-use write: each one
    statement in autocommit, one message through PgBouncer (in a transaction, three: the
    statement with BEGIN, then ROLLBACK or COMMIT, and psycopg's BEGIN apart directly)."""
    engine = create_engine(bounced, tenant_default=tenancy.NO_TENANT)
    database = make_url(bounced).database or ""
    try:
        key, secret = create_key(engine, tenant_id="acme", role="write")
        checked = KeyChecker(engine).check(secret)
        assert checked is not None and (checked.key_id, checked.tenant_id) == (key.key_id, "acme")
        time.sleep(1.5)  # PgBouncer's totals move every second (stats_period = 1)
        before = pgbouncer.counts(database)
        for _ in range(20):
            assert api_keys.lookup(engine, key.key_id).found
            assert [live[0] for live in api_keys.live(engine, [key.key_id, "0" * 16])] == [
                key.key_id
            ]
            api_keys.touch(engine, key.key_id, utcnow())
        time.sleep(1.5)
        after = pgbouncer.counts(database)
    finally:
        engine.dispose()
    assert (after[0] - before[0], after[1] - before[1]) == (60, 60)


@pytest.fixture
def app_role(pg_server: URL, own_pg_url: str, pgbouncer: Any) -> Iterator[str]:
    """A role row-level security holds, granted what the service needs, known to PgBouncer."""
    with login_role(pg_server, make_url(own_pg_url), "bouncer_app") as name:
        grant_service_role(name, own_pg_url)
        pgbouncer.add_user(name)
        yield name


def test_row_level_security_holds_across_pooled_transactions(
    pgbouncer: Any, own_pg_url: str, app_role: str
) -> None:
    """Two tenants' reads interleaved on one client connection, whose transactions PgBouncer
    hands to whichever server session is free: each sees its own memory only."""
    owner = open_storage(own_pg_url)
    for tenant in ("acme", "globex"):
        doc = MemoryDocument()
        doc.facts.append(Fact(content=f"Works at {tenant}", category="context", confidence=0.9))
        owner.save(doc, user_id="u1", tenant_id=tenant, expected_version=0)
    owner.close()
    as_role = pgbouncer.url(make_url(own_pg_url).set(username=app_role))
    engine = create_engine(as_role, tenant_default=tenancy.NO_TENANT, pool_size=1)
    storage = SQLStorage(engine)
    try:
        for _ in range(10):
            for tenant in ("acme", "globex"):
                with tenancy.acting_for(tenant):
                    facts = [f.content for f in storage.load(user_id="u1", tenant_id=tenant).facts]
                assert facts == [f"Works at {tenant}"]
        # Unfiltered SQL as the role sees the acting tenant's rows only, and none outside.
        with tenancy.acting_for("acme"), engine.connect() as conn:
            tenants = conn.execute(sa.text("SELECT DISTINCT tenant_id FROM memory_facts")).all()
        assert tenants == [("acme",)]
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM memory_facts")).scalar_one() == 0
    finally:
        storage.close()


def test_the_service_learns_through_pgbouncer_and_listens_directly(
    bounced: str, own_pg_url: str, llm: Any
) -> None:
    llm.responder = learn
    config = llm_config(llm, storage=bounced, listen_url=own_pg_url, debounce_seconds=0.0)
    service = MemoryService(config)
    try:
        listener = service.worker.wakeups
        assert isinstance(listener, NotifyListener)
        deadline = time.monotonic() + 10
        while listener.backend_pid is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # The listener's session is the server's own, not one of PgBouncer's.
        with psycopg.connect(_raw(own_pg_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT application_name, client_port FROM pg_stat_activity WHERE pid = %s",
                (listener.backend_pid,),
            ).fetchone()
        assert row is not None and row[0] == "memory-sql-listener"
        for n in range(3):
            assert service.after_agent(chat(f"tea{n}"), thread_id=f"t{n}", user_id="u1")
        assert service.flush(timeout=30)
        facts = sorted(f.content for f in service.storage.load(user_id="u1").facts)
        assert facts == ["Likes tea0", "Likes tea1", "Likes tea2"]
        assert "Likes tea0" in service.memory_context(user_id="u1")
    finally:
        service.close()


def test_without_listen_url_the_worker_does_not_listen_through_pgbouncer(
    bounced: str, llm: Any
) -> None:
    service = MemoryService(llm_config(llm, storage=bounced), start=False)
    try:
        service.worker.start()
        assert service.worker.wakeups is None
    finally:
        service.close()


def test_the_cli_works_through_pgbouncer(bounced: str) -> None:
    added = memory_sql_cli("facts", "add", "Prefers tabs", "--user", "alice", "--url", bounced)
    assert added.returncode == 0, added.stdout + added.stderr
    listed = memory_sql_cli("facts", "list", "--user", "alice", "--url", bounced)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "Prefers tabs" in listed.stdout
    status = memory_sql_cli("db", "check", "--url", bounced)
    assert status.returncode == 0, status.stdout + status.stderr


def test_listen_url_is_a_setting_shown_without_its_password() -> None:
    config = MemoryConfig(listen_url="postgresql+psycopg://app:s3cret@db:5432/memory")
    assert config.queue.listen_url == "postgresql+psycopg://app:s3cret@db:5432/memory"
    assert "s3cret" not in repr(config) and "s3cret" not in str(config.redacted())
    assert config.redacted()["queue"]["listen_url"].startswith("postgresql+psycopg://app:")
