"""The service reads from a streaming standby (``replicas.url``) within its lag bound: the
context, facts, memory, history and export are served there (counted by target in the
metrics); a reader holding a newer version (``Min-Version``, ``?min_version=``) is served by
the primary while the standby lags; a standby lagging past the bound, or down, is not read."""

from __future__ import annotations

import re
import time

import pytest
from pg_cluster import find_bindir
from pg_replication import ReplicatedPair

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

MAX_LAG = 1.0
CHECK = 0.2


def metric(http, name: str, label: str) -> float:
    found = re.search(rf'^{name}\{{[^}}]*"{label}"\}} (\S+)$', http.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def test_reads_go_to_the_replica_within_its_lag_and_to_the_primary_past_it(tmp_path, llm):
    if find_bindir() is None:
        pytest.skip("PostgreSQL's server binaries are not installed")
    with ReplicatedPair(synchronous=False) as pair:
        url = pair.create_database("memory")
        migrations.upgrade(url)
        engine = create_engine(url)
        key = create_key(engine, tenant_id="acme", role="write")[1]
        engine.dispose()
        settings = {
            **service_settings_for(llm),
            "storage": url,
            "replicas": {
                "url": pair.standby_url("memory"),
                "max_lag_seconds": MAX_LAG,
                "lag_check_seconds": CHECK,
            },
        }
        with ServiceProcess(tmp_path, settings, with_worker=False) as service:
            with service.client(key) as http:
                first = http.post("/v1/users/u1/facts", json={"content": "Lives in Lisbon"})
                assert first.status_code == 201, first.text
                pair.wait_for_replay()
                time.sleep(2 * CHECK)
                before = metric(http, "memory_sql_reads_total", "replica")
                for path in (
                    "/v1/users/u1/context",
                    "/v1/users/u1/memory",
                    "/v1/users/u1/facts?q=lisbon",
                    "/v1/users/u1/changes",
                    "/v1/export",
                ):
                    answer = http.get(path)
                    assert answer.status_code == 200, (path, answer.text)
                assert "Lisbon" in http.get("/v1/users/u1/context").json()["context"]
                assert metric(http, "memory_sql_reads_total", "replica") - before == 6

                # The standby stops replaying: a writer reads its own write from the primary.
                pair.pause_replay()
                written = http.post("/v1/users/u1/facts", json={"content": "Moved to Porto"})
                version = written.json()["version"]
                assert version == first.json()["version"] + 1
                mine = http.get("/v1/users/u1/context", headers={"Min-Version": f'"{version}"'})
                assert mine.json()["version"] == version and "Porto" in mine.json()["context"]
                listed = http.get(f"/v1/users/u1/facts?min_version={version}")
                assert "Moved to Porto" in [f["content"] for f in listed.json()["facts"]]
                assert metric(http, "memory_sql_replica_fallbacks_total", "version") >= 2
                # Past the bound, nobody reads the standby.
                time.sleep(MAX_LAG + 2 * CHECK)
                theirs = http.get("/v1/users/u1/context")
                assert theirs.json()["version"] == version
                assert metric(http, "memory_sql_replica_fallbacks_total", "lag") >= 1
                lag = re.search(
                    r"^memory_sql_replica_lag_seconds (\S+)$", http.get("/metrics").text, re.M
                )
                assert lag is not None and float(lag.group(1)) > MAX_LAG

                pair.resume_replay()
                pair.wait_for_replay()
                time.sleep(2 * CHECK)
                before = metric(http, "memory_sql_reads_total", "replica")
                assert http.get("/v1/users/u1/context").json()["version"] == version
                assert metric(http, "memory_sql_reads_total", "replica") - before == 1

                # The standby down: reads are the primary's, none fails.
                pair.standby.stop("immediate")
                for _ in range(3):
                    answer = http.get("/v1/users/u1/context")
                    assert answer.status_code == 200 and answer.json()["version"] == version
                assert metric(http, "memory_sql_replica_fallbacks_total", "error") >= 1
            assert "Traceback" not in service.log
