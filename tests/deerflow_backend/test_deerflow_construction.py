"""Building the DeerFlow backend: DeerFlow's factory resolving it, ``backend_config`` and its
errors, the tool mode, and DeerFlow imported by the backend module alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from deerflow.agents.memory.manager import (
    MemoryManager,
    NoopMemoryManager,
    build_memory_manager,
    resolve_manager_class,
)

from memory_sql import ConfigError, SchemaOutOfDateError
from memory_sql.integrations.deerflow import SQLMemoryManager
from memory_sql.integrations.deerflow.config import read_backend_config

from .conftest import MANAGER_CLASS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path",
    [
        "memory_sql.integrations.deerflow:SQLMemoryManager",
        "memory_sql.integrations.deerflow.SQLMemoryManager",
        "memory_sql.integrations.deerflow.manager:SQLMemoryManager",
    ],
)
def test_the_hosts_factory_resolves_the_dotted_path_to_a_memory_manager(path: str) -> None:
    cls = resolve_manager_class(path)
    assert cls is SQLMemoryManager
    assert issubclass(cls, MemoryManager)
    assert cls.supports_search is True


def test_the_factory_refuses_what_is_not_a_memory_manager() -> None:
    assert resolve_manager_class("noop") is NoopMemoryManager
    with pytest.raises(ValueError, match="non-MemoryManager"):
        resolve_manager_class("memory_sql.service:MemoryService")
    with pytest.raises(ValueError, match="not found"):
        resolve_manager_class("memory_sql.integrations.deerflow:Nope")


def test_with_no_backend_config_memory_goes_to_a_sqlite_file_in_the_hosts_state_folder(
    make_manager: Any, tmp_path: Path, user: str
) -> None:
    manager = make_manager()
    database = tmp_path / "deerflow-home" / "memory_sql.db"
    assert database.is_file()  # made, with the schema, by the backend
    assert manager.backend_config["storage_path"] == str(tmp_path / "deerflow-home")
    manager.create_fact("Prefers tabs", user_id=user)
    engine = sa.create_engine(f"sqlite:///{database}")
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT tenant_id, user_id, content FROM memory_facts")).all()
    engine.dispose()
    assert rows == [("default", user, "Prefers tabs")]


def test_a_relative_storage_path_is_the_hosts_to_resolve(make_manager: Any, tmp_path: Path) -> None:
    make_manager({"storage_path": "state/memory"})
    assert (tmp_path / "deerflow-home" / "state" / "memory" / "memory_sql.db").is_file()


def test_backend_config_keys_and_deerflows_names(tmp_path: Path) -> None:
    settings = read_backend_config(
        {
            "storage_path": str(tmp_path),
            "tenant_id": "acme",
            "in_process_worker": False,
            "debounce_seconds": 5,
            "max_facts": 100,
            "max_injection_tokens": 1500,
            "fact_confidence_threshold": 0.8,
            "token_counting": "char",
            "model": {
                "provider": "openai",
                "model": "gpt-4o-mini",
                "api_key": "sk-secret",
                "base_url": "http://127.0.0.1:9/v1",
                "temperature": 0.2,
            },
        }
    )
    config = settings.config
    assert settings.url == f"sqlite:///{tmp_path / 'memory_sql.db'}"
    assert settings.tenant_id == "acme" and settings.in_process_worker is False
    assert settings.own_llm is True
    assert (config.queue.debounce_seconds, config.eviction.max_facts) == (5, 100)
    assert config.recall.injected_memory_max_tokens == 1500 and config.update.min_confidence == 0.8
    assert config.tokens.counting is False
    assert config.llm.model == "gpt-4o-mini" and config.llm.base_url == "http://127.0.0.1:9/v1"
    assert config.llm.api_key is not None and config.llm.api_key.get_secret_value() == "sk-secret"
    assert config.llm.temperature == 0.2
    assert read_backend_config({"url": "postgresql://u@db/memory"}).url == (
        "postgresql://u@db/memory"
    )
    assert read_backend_config({"storage": "sqlite:///x.db"}).url == "sqlite:///x.db"
    assert read_backend_config({}).own_llm is False


def test_the_spool_lives_in_the_hosts_state_folder_whatever_the_database(tmp_path: Path) -> None:
    """Conversations waiting out a database outage go where DeerFlow keeps its state (a
    volume that outlives the container), not the container user's home."""
    for url in ("postgresql+psycopg://u@db/memory", None):
        given = {"storage_path": str(tmp_path), **({"url": url} if url else {})}
        assert read_backend_config(given).config.spool.directory == tmp_path / "memory_sql.spool"
    mine = tmp_path / "elsewhere"
    given = {"storage_path": str(tmp_path), "spool_dir": str(mine)}
    assert read_backend_config(given).config.spool.directory == mine
    assert (
        read_backend_config({"url": "postgresql+psycopg://u@db/m"}).config.spool.directory is None
    )


@pytest.mark.parametrize(
    ("backend_config", "named"),
    [
        ({"bogus": 1}, "'bogus'"),
        ({"max_factz": 10}, "did you mean 'max_facts'"),
        ({"fact_eviction_policy": "lru"}, "DeerMem setting"),
        ({"max_facts": "many"}, "max_facts"),
        ({"max_facts": 3}, "max_facts"),
        ({"debounce_seconds": True}, "debounce_seconds"),
        ({"model": {"provider": "anthropic", "model": "claude"}}, "model.provider"),
        ({"model": {"model": "a", "top_p": 1}}, "'top_p'"),
        ({"model": "gpt-4o"}, "memory.backend_config.model"),
        ({"model": {"model": "a"}, "model_name": "b"}, "model.model or model_name"),
        ({"url": "mysql://db/memory"}, "memory.backend_config.url"),
        ({"url": "/var/lib/memory"}, "memory.backend_config.url"),
        ({"url": "sqlite:///a.db", "storage": "sqlite:///b.db"}, "url or storage"),
        ({"tenant_id": "a/b"}, "tenant_id"),
        ({"storage_class": "pkg.mod:Store"}, "storage_class"),
        ({"in_process_worker": "yes"}, "in_process_worker"),
        ({"llm_base_url": "ftp://x"}, "llm_base_url"),
    ],
)
def test_a_bad_backend_config_fails_at_construction_naming_the_key(
    make_manager: Any, backend_config: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match="memory.backend_config") as caught:
        make_manager(backend_config)
    assert named in str(caught.value)
    assert "sk-" not in str(caught.value)


def test_tool_mode_is_allowed_since_the_backend_searches(make_manager: Any, user: str) -> None:
    manager = make_manager({"in_process_worker": False}, mode="tool")
    assert manager.mode == "tool"
    manager.create_fact("Uses Emacs", user_id=user)
    assert [f["content"] for f in manager.search("emacs", user_id=user)] == ["Uses Emacs"]


def test_direct_construction_works_without_host_hooks(tmp_path: Path, user: str) -> None:
    manager = SQLMemoryManager(
        backend_config={"url": f"sqlite:///{tmp_path / 'direct.db'}", "in_process_worker": False}
    )
    try:
        assert manager.callbacks is None
        assert manager.get_memory(user_id=user)["facts"] == []
    finally:
        manager.close()
        manager.close()  # twice is fine
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        SQLMemoryManager(backend_config={"bogus": 1})


def test_the_repr_shows_no_secret(make_manager: Any) -> None:
    manager = make_manager(
        {
            "in_process_worker": False,
            "llm_api_key": "sk-very-secret",
            "model_name": "m",
            "llm_base_url": "http://user:pw@127.0.0.1:9/v1",
        }
    )
    shown = repr(manager)
    assert "sk-very-secret" not in shown and ":pw@" not in shown
    assert "SQLMemoryManager" in shown


@pytest.mark.postgres
def test_a_postgresql_database_below_the_schema_head_is_refused(
    make_manager: Any, new_pg_database: Any
) -> None:
    url = new_pg_database().render_as_string(hide_password=False)
    with pytest.raises(SchemaOutOfDateError, match="memory-sql db upgrade"):
        make_manager({"url": url})


def test_deerflow_is_imported_by_the_backend_module_alone() -> None:
    """Without DeerFlow importable, memory_sql, its command line, the integration package
    and its folder reader import fine and import no ``deerflow``; asking for the backend
    class says what it needs."""
    code = (
        "import sys\n"
        "import memory_sql, memory_sql.cli, memory_sql.integrations.deerflow as df\n"
        "import memory_sql.integrations.deerflow.folders, memory_sql.integrations.deerflow.config\n"
        "import memory_sql.integrations.deerflow.llm\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'deerflow'], sys.modules\n"
        "try:\n"
        "    df.SQLMemoryManager\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "needs DeerFlow's harness" in done.stdout
    importers = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "memory_sql").rglob("*.py")
        if any(
            line.lstrip().startswith(("import deerflow", "from deerflow"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert importers == ["memory_sql/integrations/deerflow/manager.py"]


def test_the_factory_builds_it_from_memory_config(tmp_path: Path) -> None:
    manager = build_memory_manager(
        {
            "manager_class": MANAGER_CLASS,
            "backend_config": {"url": f"sqlite:///{tmp_path / 'm.db'}", "in_process_worker": False},
        },
        runtime_home=tmp_path,
    )
    try:
        assert isinstance(manager, SQLMemoryManager)
        assert manager.mode == "middleware"
    finally:
        manager.close()
