"""A libpq multi-host URL (``h1:5432,h2:5432``), for failover: read as SQLAlchemy reads one
(each host a ``host=`` parameter, so libpq tries them in order), its password never shown; and
the read replica's setting, redacted like the storage URL."""

from __future__ import annotations

import pytest

from memory_sql import MemoryConfig
from memory_sql.database import create_engine, redacted, resolve_url

MULTI = "postgresql://app:hunter2@db1:5432,db2:6543/memory?target_session_attrs=read-write"


def test_a_multi_host_url_becomes_host_parameters_that_psycopg_joins() -> None:
    url = resolve_url(MULTI)
    assert url.drivername == "postgresql+psycopg" and url.database == "memory"
    assert url.query["host"] == ("db1:5432", "db2:6543")
    engine = create_engine(url)
    try:
        _args, params = engine.dialect.create_connect_args(engine.url)
    finally:
        engine.dispose()
    assert params["host"] == "db1,db2" and params["port"] == "5432,6543"
    assert params["target_session_attrs"] == "read-write" and params["password"] == "hunter2"


@pytest.mark.parametrize(
    "written",
    ["postgresql://db1,db2/memory", "postgresql://u@db1:1,db2:2", "postgresql://u@h:5432/db"],
)
def test_hosts_without_ports_or_a_path_and_a_single_host_are_read_too(written: str) -> None:
    url = resolve_url(written)
    hosts = url.query.get("host", ())
    assert (len(hosts) == 2) == ("," in written)
    assert url.host == (None if "," in written else "h")


def test_a_comma_in_a_single_hosts_password_is_not_read_as_hosts() -> None:
    url = resolve_url("postgresql+psycopg://app:a,b@db.internal:5433/memory")
    assert (url.username, url.password, url.host, url.port) == ("app", "a,b", "db.internal", 5433)
    assert "host" not in url.query


def test_no_password_of_a_multi_host_url_is_shown() -> None:
    assert "hunter2" not in redacted(MULTI)
    assert "hunter2" not in redacted(resolve_url(MULTI))
    config = MemoryConfig(storage=MULTI, replica_url=MULTI.replace("read-write", "prefer-standby"))
    assert config.replicas.url is not None and "prefer-standby" in config.replicas.url
    assert "hunter2" not in repr(config) and "hunter2" not in str(config.redacted())


def test_the_replica_settings_have_flat_names_and_bounds() -> None:
    config = MemoryConfig(replica_max_lag_seconds=2.5, replica_lag_check_seconds=0.5)
    assert (config.replicas.max_lag_seconds, config.replicas.lag_check_seconds) == (2.5, 0.5)
    assert config.replicas.url is None
    default = MemoryConfig()
    assert (default.replicas.max_lag_seconds, default.replicas.lag_check_seconds) == (5.0, 1.0)
    with pytest.raises(ValueError):
        MemoryConfig(replica_lag_check_seconds=0)
