"""The private PostgreSQL cluster that fault tests stop, restart and crash (``pg_cluster``).
Each test pays one ``initdb`` (about a second), so each checks several things."""

from __future__ import annotations

import time

import psycopg
import pytest
import sqlalchemy as sa
from pg_cluster import PrivateCluster

pytestmark = pytest.mark.slow


def test_starts_creates_databases_and_restarts_with_port_and_data(
    private_pg: PrivateCluster,
) -> None:
    assert private_pg.is_running()
    port = private_pg.port
    assert private_pg.url == f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    url = private_pg.create_database("fault_test")
    assert url == f"postgresql+psycopg://postgres@127.0.0.1:{port}/fault_test"
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            assert conn.execute(sa.text("SELECT current_database()")).scalar_one() == "fault_test"
            conn.execute(sa.text("CREATE TABLE kept (n int)"))
            conn.execute(sa.text("INSERT INTO kept VALUES (42)"))
        engine.dispose()

        private_pg.restart()

        assert private_pg.port == port
        assert private_pg.is_running()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT n FROM kept")).scalars().all() == [42]
    finally:
        engine.dispose()


def test_stop_refuses_connections_start_and_kill(private_pg: PrivateCluster) -> None:
    with private_pg.connect() as conn:
        conn.execute("CREATE TABLE survives (n int)")
        conn.execute("INSERT INTO survives VALUES (7)")

    private_pg.stop()
    assert not private_pg.is_running()
    began = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        private_pg.connect(connect_timeout=2)
    assert time.monotonic() - began < 1.5  # refused at once, not a timeout

    private_pg.start()
    held = private_pg.connect()
    assert held.execute("SELECT n FROM survives").fetchall() == [(7,)]

    private_pg.kill()  # a crash: no shutdown checkpoint
    assert not private_pg.is_running()
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")
    held.close()

    private_pg.start()  # crash recovery
    with private_pg.connect() as conn:
        assert conn.execute("SELECT n FROM survives").fetchall() == [(7,)]


def test_close_stops_the_server_and_removes_the_folder(private_pg: PrivateCluster) -> None:
    assert private_pg.base.is_dir()
    private_pg.close()
    assert not private_pg.base.exists()
    assert not private_pg.is_running()
    with pytest.raises(psycopg.OperationalError):
        private_pg.connect(connect_timeout=2)
    private_pg.close()  # a second close (the fixture's) is a no-op
