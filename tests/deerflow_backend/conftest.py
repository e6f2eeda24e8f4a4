"""The DeerFlow backend's tests: the stand-in of DeerFlow's host contract
(``tests/deerflow_standin``) is put on ``sys.path`` here, for these tests only, as the
``deerflow`` package; fixtures build backends the way DeerFlow's factory does."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

STANDIN = Path(__file__).resolve().parent.parent / "deerflow_standin"
if str(STANDIN) not in sys.path:
    sys.path.insert(0, str(STANDIN))

MANAGER_CLASS = "memory_sql.integrations.deerflow:SQLMemoryManager"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> str:
    """A migrated database URL: a SQLite file of this test's own, or the session's PostgreSQL
    database (tests use users of their own there)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def own_database(request: pytest.FixtureRequest) -> str:
    """A migrated database of this test's own: ``flush`` (and so ``shutdown_flush``) runs
    every pending update of the database, so tests that flush share no queue."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "own_pg_url")


@pytest.fixture
def user() -> str:
    return f"user-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_manager(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make_manager(backend_config, mode=…, hooks=…)``: a backend built by the stand-in's
    factory (``manager_class`` the dotted path, ``storage_path`` injected), closed after the
    test. ``hooks`` replaces the host's default hooks."""
    from deerflow.agents.memory.manager import build_memory_manager

    made: list[Any] = []

    def make(
        backend_config: dict[str, Any] | None = None,
        *,
        mode: str = "middleware",
        hooks: dict[str, Any] | None = None,
    ) -> Any:
        manager = build_memory_manager(
            {"manager_class": MANAGER_CLASS, "mode": mode, "backend_config": backend_config},
            runtime_home=tmp_path / "deerflow-home",
            host_hooks=hooks,
        )
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()
