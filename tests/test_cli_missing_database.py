"""Commands that only read never create a SQLite file: a missing one is a one-line error naming
it. Commands that write (``db upgrade``, ``ingest``, ``import``, ``facts add``) still create it.
Through Typer's runner and the installed ``python -m memory_sql``, on real SQLite files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from memory_sql import migrations
from memory_sql.cli import app
from memory_sql.database import create_engine

ROOT = Path(__file__).resolve().parent.parent
# Nothing from the developer's environment may reach the commands: no real LLM, no other database.
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}
runner = CliRunner(env=CLEAN_ENV)

READ_ONLY = {
    "db current": ["db", "current"],
    "db check": ["db", "check"],
    "facts list": ["facts", "list", "--user", "alice"],
    "facts search": ["facts", "search", "tea"],
    "facts remove": ["facts", "remove", "--user", "alice", "fact_3f2a9c41d7e0"],
    "report": ["report"],
    "report --json": ["report", "--json"],
    "export memory.json": ["export", "--user", "alice"],
    "export -o": ["export", "--user", "alice", "-o", "{out}/memory.json"],
    "export --jsonl": ["export", "--jsonl", "{out}/all.jsonl"],
    "context": ["context", "--user", "alice"],
    "queue list": ["queue", "list"],
    "queue retry": ["queue", "retry", "--all"],
    "queue drop": ["queue", "drop", "--all", "--yes"],
    "forget": ["forget", "--user", "alice", "--yes"],
}


def one_error_line(result, path: Path) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.output.count("\n") == 1, result.output
    assert f"no database at {path}" in result.output, result.output
    return result.output


@pytest.mark.parametrize("args", READ_ONLY.values(), ids=READ_ONLY.keys())
def test_a_read_only_command_refuses_a_missing_sqlite_file(tmp_path, args):
    missing = tmp_path / "nope.db"
    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(out=out) for a in args]
    result = runner.invoke(app, [*args, "--url", f"sqlite:///{missing}"])
    one_error_line(result, missing)
    assert "memory-sql db upgrade" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no nope.db, -wal or -shm
    assert list(out.iterdir()) == []


def test_the_url_from_the_environment_config_or_default_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from_env = tmp_path / "env.db"
    result = runner.invoke(
        app,
        ["context", "--user", "alice"],
        env={"MEMORY_SQL_DATABASE_URL": f"sqlite:///{from_env}"},
    )
    one_error_line(result, from_env)

    from_config = tmp_path / "config.db"
    config = tmp_path / "memory.yaml"
    config.write_text(f"memory:\n  storage: sqlite:///{from_config}\n", encoding="utf-8")
    for args in (["context", "--user", "alice"], ["facts", "list", "--user", "alice"]):
        one_error_line(runner.invoke(app, [*args, "--config", str(config)]), from_config)

    for args in (["report"], ["db", "current"]):  # the default: ./memory_sql.db
        one_error_line(runner.invoke(app, args), Path("memory_sql.db"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.yaml"]


def test_a_relative_path_is_named_as_given_by_the_installed_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whatever is installed
    done = subprocess.run(
        [sys.executable, "-m", "memory_sql", "db", "current", "--url", "sqlite:///nope.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "no database at nope.db" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_and_an_in_memory_database_are_opened(tmp_path, sqlite_url):
    result = runner.invoke(app, ["db", "current", "--url", "sqlite://"])
    assert result.exit_code == 0 and "revision none" in result.output, result.output
    empty = tmp_path / "empty.db"
    empty.touch()
    result = runner.invoke(app, ["db", "current", "--url", f"sqlite:///{empty}"])
    assert result.exit_code == 0 and "revision none" in result.output, result.output
    result = runner.invoke(app, ["report", "--json", "--url", sqlite_url])
    assert result.exit_code == 0, result.output


def test_commands_that_write_still_create_the_file(tmp_path):
    upgraded = tmp_path / "upgraded.db"
    result = runner.invoke(app, ["db", "upgrade", "--url", f"sqlite:///{upgraded}"])
    assert result.exit_code == 0, result.output
    engine = create_engine(f"sqlite:///{upgraded}")
    try:
        assert migrations.current_revision(engine) == migrations.head_revision()
    finally:
        engine.dispose()
    added = runner.invoke(
        app, ["facts", "add", "--user", "alice", "Likes tea", "--url", f"sqlite:///{upgraded}"]
    )
    assert added.exit_code == 0, added.output

    # On a missing file these create it, with the schema (a new SQLite database is migrated).
    memories = tmp_path / "memories.jsonl"
    memories.write_text("", encoding="utf-8")
    chat = tmp_path / "chat.json"
    chat.write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]),
        encoding="utf-8",
    )
    for name, args in {
        "facts-add.db": ["facts", "add", "--user", "alice", "Likes tea"],
        "import.db": ["import", "--jsonl", str(memories)],
        "ingest.db": ["ingest", str(chat), "--user", "alice", "--no-wait"],
    }.items():
        path = tmp_path / name
        result = runner.invoke(app, [*args, "--url", f"sqlite:///{path}"])
        assert result.exit_code == 0, (name, result.output)
        assert "no database at" not in result.output, result.output
        engine = create_engine(f"sqlite:///{path}")
        try:
            assert migrations.current_revision(engine) == migrations.head_revision(), name
        finally:
            engine.dispose()


def test_a_read_only_command_does_not_give_an_empty_file_a_schema(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    for args in (["facts", "list", "--user", "alice"], ["report"], ["export", "--user", "a"]):
        result = runner.invoke(app, [*args, "--url", f"sqlite:///{empty}"])
        assert result.exit_code == 1, result.output
        assert "has no memory_sql tables" in result.output and "memory-sql db upgrade" in (
            result.output
        )
    engine = create_engine(f"sqlite:///{empty}")
    try:
        assert migrations.current_revision(engine) is None
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
