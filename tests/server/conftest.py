"""Fixtures of the service tests: a migrated database of the test's own (SQLite or
PostgreSQL), keys made in it, and a running ``memory-sql serve`` on it with the scripted LLM."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PGBOUNCER_ENV
from llm_server import ScriptedLLM

from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from server.service_process import ServiceProcess


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database at the schema head, of this test's own, on each backend."""
    if request.param == "sqlite":
        from memory_sql import migrations

        url = f"sqlite:///{tmp_path / 'service.db'}"
        migrations.upgrade(url)
        return url
    return request.getfixturevalue("own_pg_url")


@pytest.fixture
def make_key(database_url: str) -> Iterator[Callable[..., str]]:
    """``make_key(tenant, role)``: a new API key's secret text."""
    engine = create_engine(database_url)

    def make(tenant: str, role: str = "write") -> str:
        return create_key(engine, tenant_id=tenant, role=role)[1]

    yield make
    engine.dispose()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def service_settings_for(llm: ScriptedLLM) -> dict[str, Any]:
    """The settings of a service whose memory LLM is ``llm``: no debounce, a sweep a second."""
    return {
        "model_name": "test-model",
        "llm_base_url": llm.base_url,
        "llm_api_key": "sk-test",
        "llm_timeout_seconds": 5.0,
        "llm_max_retries": 0,
        "debounce_seconds": 0.0,
        "sweep_interval_seconds": 1.0,
        "token_counting": False,
    }


@pytest.fixture
def service_settings(
    database_url: str, llm: ScriptedLLM, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """With ``MEMORY_SQL_TEST_PGBOUNCER=1``, a PostgreSQL service reaches its database through
    a real PgBouncer in transaction mode, and LISTENs on the direct URL (``listen_url``)."""
    if os.environ.get(PGBOUNCER_ENV) == "1" and database_url.startswith("postgresql"):
        bouncer = request.getfixturevalue("pgbouncer")
        return {
            **service_settings_for(llm),
            "storage": bouncer.url(database_url),
            "listen_url": database_url,
        }
    return {**service_settings_for(llm), "storage": database_url}


@pytest.fixture
def start_service(
    tmp_path: Path, service_settings: dict[str, Any]
) -> Iterator[Callable[..., ServiceProcess]]:
    """``start_service(**overrides)``: a running service; all are stopped at the end."""
    started: list[ServiceProcess] = []

    def start(*, with_worker: bool = True, **overrides: Any) -> ServiceProcess:
        service = ServiceProcess(
            tmp_path, {**service_settings, **overrides}, with_worker=with_worker
        )
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def service(start_service: Callable[..., ServiceProcess]) -> ServiceProcess:
    return start_service()
