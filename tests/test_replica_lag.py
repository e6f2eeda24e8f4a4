"""A read replica is used only while its replay lag is within bounds: a standby lagged on
purpose (``pg_wal_replay_pause()``) is not read until it has caught up; one that is down is
not read either, and a "replica" that is a primary has no lag."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pg_cluster import find_bindir
from pg_replication import ReplicatedPair

from memory_sql import migrations, ops
from memory_sql.database import create_engine
from memory_sql.storage import SQLStorage
from memory_sql.storage.replicas import ERROR, LAG, PRIMARY, REPLICA, ReadReplica, ReplicaStorage

pytestmark = pytest.mark.postgres

MAX_LAG = 0.5
CHECK = 0.1


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    if find_bindir() is None:
        pytest.skip("PostgreSQL's server binaries are not installed")
    with ReplicatedPair(synchronous=False) as replicated:
        yield replicated


def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(CHECK)
    return False


def test_a_replica_lagged_on_purpose_is_not_read_until_it_catches_up(pair) -> None:
    url = pair.create_database("memory")
    migrations.upgrade(url)
    primary_engine, replica_engine = create_engine(url), create_engine(pair.standby_url("memory"))
    primary = SQLStorage(primary_engine)
    replica = ReplicaStorage(replica_engine, primary)
    fallbacks: list[str] = []
    lags: list[float] = []
    chooser = ReadReplica(
        primary_engine,
        replica_engine,
        max_lag_seconds=MAX_LAG,
        lag_check_seconds=CHECK,
        on_fallback=fallbacks.append,
        on_lag=lags.append,
    )
    try:
        ops.add_fact(primary, "Lives in Lisbon", user_id="u1")
        pair.wait_for_replay()
        assert chooser.choose().target == REPLICA
        assert lags and 0 <= lags[-1] <= MAX_LAG
        assert replica.load(user_id="u1").version == 1

        pair.pause_replay()
        ops.add_fact(primary, "Moved to Porto", user_id="u1")
        # The replica stays at the old version while its replay is paused...
        assert _until(lambda: chooser.choose().target == PRIMARY)
        assert fallbacks[-1] == LAG and lags[-1] > MAX_LAG
        assert replica.load(user_id="u1").version == 1
        assert primary.load(user_id="u1").version == 2
        time.sleep(2 * CHECK)  # measured again: still lagging, still not read
        assert chooser.choose() == chooser.choose() and chooser.choose().target == PRIMARY

        pair.resume_replay()
        assert _until(lambda: chooser.choose().target == REPLICA)
        assert replica.load(user_id="u1").version == 2
    finally:
        replica.close()
        primary.close()
        primary_engine.dispose()
        replica_engine.dispose()


def test_a_replica_that_is_down_is_not_read_and_a_primary_has_no_lag(pair) -> None:
    url = pair.create_database("memory")
    migrations.upgrade(url)
    primary_engine = create_engine(url)
    replica_engine = create_engine(pair.standby_url("memory"))
    fallbacks: list[str] = []
    chooser = ReadReplica(
        primary_engine,
        replica_engine,
        max_lag_seconds=MAX_LAG,
        lag_check_seconds=CHECK,
        on_fallback=fallbacks.append,
    )
    itself = ReadReplica(
        primary_engine, primary_engine, max_lag_seconds=MAX_LAG, lag_check_seconds=CHECK
    )
    try:
        assert chooser.choose().target == REPLICA
        assert itself.measure_lag() == 0.0
        pair.standby.stop("immediate")
        time.sleep(CHECK)
        assert chooser.choose().target == PRIMARY
        assert fallbacks == [ERROR] and chooser.lag is None
        pair.standby.start()
        assert _until(lambda: chooser.choose().target == REPLICA)
    finally:
        primary_engine.dispose()
        replica_engine.dispose()
