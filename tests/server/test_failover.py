"""A failover under load loses nothing acknowledged: the service on a multi-host URL
(``target_session_attrs=read-write``) of a primary and its synchronous standby, 16 clients
posting conversations, the primary SIGKILLed and the standby promoted. Every conversation
answered 202 is learned exactly once, on the new primary; the service answers reads again
within seconds of the promotion, and logs the new primary once."""

from __future__ import annotations

import time

import pytest
from pg_cluster import find_bindir
from pg_replication import ReplicatedPair

from memory_sql import migrations
from server.failover_run import run_failover

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

RECOVERY_SECONDS = 10.0


def test_a_synchronous_standby_promoted_under_load_loses_and_repeats_nothing(tmp_path, llm):
    if find_bindir() is None:
        pytest.skip("PostgreSQL's server binaries are not installed")
    with ReplicatedPair(synchronous=True) as pair:
        pair.create_database("memory")
        url = pair.failover_url("memory")
        migrations.upgrade(url)

        def fail() -> float:
            pair.primary.kill()
            pair.promote()
            return time.monotonic()

        figures = run_failover(
            tmp_path, llm, url, lambda: pair.standby_url("memory"), fail, drain_seconds=45
        )
    print("failover (synchronous):", figures)
    assert figures["acknowledged before the kill"] > 50, figures  # the load was on
    assert figures["acknowledged"] > figures["acknowledged before the kill"], figures
    assert figures["lost"] == 0, figures
    assert figures["twice"] == 0, figures
    assert figures["learned"] == figures["acknowledged"], figures
    assert figures["promotion to reads answered (s)"] <= RECOVERY_SECONDS, figures
    assert figures["failover_logged"] == 1, figures
    assert figures["answers"].get("500", 0) == 0 and figures["tracebacks"] == 0, figures
    assert figures["queue rows left"] == 0, figures
