"""The CLI's two rules, the same in every command: where the database is (``--url`` or
``$MEMORY_SQL_DATABASE_URL``, else ``--config`` or ``$MEMORY_SQL_CONFIG``, else
``./memory_sql.db``), and which tenant (``default`` where a user is named, with a note naming
the tenants that hold the user when nothing is there; every tenant in listings). Also what the
output looks like to a program: keys whole, a header row, nothing cut or wrapped. Through
Typer's runner on real SQLite files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_sql import Fact, open_storage
from memory_sql.cli import app
from memory_sql.database import create_engine
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import Signals
from memory_sql.queue import UpdateQueue
from memory_sql.scope import Scope

CHAT = [Message("user", "I use vim"), Message("assistant", "Noted")]

CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}
runner = CliRunner(env=CLEAN_ENV)


def run(*args: str, code: int = 0, env: dict[str, str] | None = None) -> str:
    result = runner.invoke(app, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, result.output
    return result.output


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A config file naming a SQLite file, in a working directory of its own (so the default
    ./memory_sql.db would show up in it)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    database = tmp_path / "configured.db"
    config = tmp_path / "config.yaml"
    config.write_text(f"memory:\n  storage: sqlite:///{database}\n", encoding="utf-8")
    return config, database


# Each command, given only the config (as a flag, then as $MEMORY_SQL_CONFIG), in order: the
# first ones create the database, the others read or change it.
COMMANDS = [
    ["db", "upgrade"],
    ["db", "current"],
    ["db", "check"],
    ["keys", "create", "--tenant", "acme"],
    ["keys", "list"],
    ["facts", "add", "--user", "alice", "Prefers tea"],
    ["facts", "list", "--user", "alice"],
    ["facts", "search", "tea"],
    ["context", "--user", "alice"],
    ["queue", "list"],
    ["report", "--json"],
    ["export", "--jsonl", "{out}"],
    ["import", "--jsonl", "{out}"],
    ["forget", "--user", "nobody", "--yes"],
]


@pytest.mark.parametrize("how", ["--config", "MEMORY_SQL_CONFIG"])
def test_every_command_finds_the_database_of_the_config(configured, tmp_path, how):
    config, database = configured
    exported = tmp_path / "all.jsonl"
    outputs = {}
    for command in COMMANDS:
        args = [part.format(out=exported) for part in command]
        if how == "--config":
            outputs[" ".join(command[:2])] = run(*args, "--config", str(config))
        else:
            outputs[" ".join(command[:2])] = run(*args, env={"MEMORY_SQL_CONFIG": str(config)})
    assert list(Path.cwd().iterdir()) == []  # never ./memory_sql.db
    assert str(database) in outputs["db upgrade"]
    assert "Prefers tea" in outputs["facts list"] and "Prefers tea" in outputs["facts search"]
    assert "acme" in outputs["keys list"]
    with open_storage(f"sqlite:///{database}") as storage:
        assert [f.content for f in storage.load(user_id="alice").facts] == ["Prefers tea"]


def test_the_url_wins_over_the_config(configured, tmp_path):
    config, database = configured
    other = tmp_path / "other.db"
    run("db", "upgrade", "--config", str(config), "--url", f"sqlite:///{other}")
    assert other.exists() and not database.exists()
    env = {"MEMORY_SQL_DATABASE_URL": f"sqlite:///{other}"}
    run("facts", "add", "--user", "bob", "Likes jazz", "--config", str(config), env=env)
    with open_storage(f"sqlite:///{other}") as storage:
        assert [f.content for f in storage.load(user_id="bob").facts] == ["Likes jazz"]
    assert not database.exists()


def test_a_config_whose_storage_is_a_folder_is_refused_by_the_sql_commands(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"memory:\n  storage: {tmp_path / 'files'}\n", encoding="utf-8")
    for args in (["keys", "list"], ["db", "current"], ["facts", "list", "--user", "a"]):
        output = run(*args, "--config", str(config), code=1)
        assert "is not a database URL" in output


# the tenant rule -------------------------------------------------------------------------------


@pytest.fixture
def two_tenants(sqlite_url: str) -> str:
    """bob's memory in the tenant acme only (as the HTTP API writes it), a failed update in
    acme and a waiting one in default."""
    with open_storage(sqlite_url) as storage:
        doc = storage.load(user_id="bob", agent_name="coder", tenant_id="acme")
        doc.facts.append(Fact(content="Writes Rust", category="knowledge", confidence=0.9))
        storage.save(doc, user_id="bob", agent_name="coder", tenant_id="acme", expected_version=0)
    engine = create_engine(sqlite_url)
    queue = UpdateQueue(engine)
    queue.add(Scope.of(user_id="bob", agent_name="coder", tenant_id="acme"), "t1", CHAT, Signals())
    queue.add(Scope.of(user_id="carol"), "t2", CHAT, Signals())
    engine.dispose()
    return sqlite_url


def test_a_read_of_one_user_names_the_tenants_holding_it(two_tenants):
    url = two_tenants
    for args in (
        ["facts", "list", "--user", "bob", "--agent", "coder"],
        ["context", "--user", "bob", "--agent", "coder"],
        ["export", "--user", "bob", "--agent", "coder"],
    ):
        output = " ".join(run(*args, "--url", url).split())
        assert "without --tenant this is tenant default" in output, args
        assert "user bob has memories in tenant acme (pass --tenant acme)" in output, args
    listed = run(
        "facts", "list", "--user", "bob", "--agent", "coder", "--tenant", "acme", "--url", url
    )
    assert "Writes Rust" in listed and "has memories in" not in listed
    # Given --tenant, nothing is guessed: the tenant asked for is empty, and no note.
    empty = run("facts", "list", "--user", "bob", "--tenant", "beta", "--url", url)
    assert "has memories in" not in empty and "version 0" in empty
    forgot = " ".join(run("forget", "--user", "bob", "--yes", "--url", url).split())
    assert "0 rows" in forgot and "pass --tenant acme" in forgot


def test_listings_cover_every_tenant_unless_one_is_given(two_tenants):
    url = two_tenants
    rows = json.loads(run("queue", "list", "--json", "--url", url))
    assert sorted(r["tenant_id"] for r in rows) == ["acme", "default"]
    only = json.loads(run("queue", "list", "--json", "--tenant", "acme", "--url", url))
    assert [r["tenant_id"] for r in only] == ["acme"]
    found = json.loads(run("facts", "search", "rust", "--json", "--url", url))
    assert [r["tenant_id"] for r in found] == ["acme"]
    assert json.loads(run("report", "--json", "--url", url))["totals"]["facts"] == 1
    unnamed = json.loads(run("queue", "list", "--json", "--agent", "-", "--url", url))
    assert [r["user_id"] for r in unnamed] == ["carol"]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["queue", "list"], "every tenant"),
        (["facts", "search"], "every tenant"),
        (["report"], "every tenant"),
        (["keys", "list"], "every tenant"),
        (["facts", "list"], "default: 'default'"),
        (["context"], "default: 'default'"),
        (["forget"], "default: 'default'"),
        (["ingest"], "default: 'default'"),
    ],
)
def test_the_help_says_the_tenant_rule(command, says):
    text = " ".join(run(*command, "--help", env={"COLUMNS": "200"}).split())
    options = text[text.index("Options") :]
    tenant_help = options[options.index("--tenant") :]
    assert says in tenant_help[:200], tenant_help[:200]


# what a program reads --------------------------------------------------------------------------


def test_queue_list_keeps_each_key_whole_on_one_line(sqlite_url):
    engine = create_engine(sqlite_url)
    thread = "thread-" + "x" * 90
    UpdateQueue(engine).add(Scope.of(user_id="alice", agent_name="coder"), thread, CHAT, Signals())
    engine.dispose()
    output = run("queue", "list", "--url", sqlite_url, env={"COLUMNS": "80"})
    lines = output.splitlines()
    assert lines[1].split() == ["status", "attempts", "due", "(UTC)", "key"]
    key = f"turn:default/alice/coder/{thread}"
    assert any(line.endswith(key) for line in lines), output
    retried = run("queue", "retry", key, "--url", sqlite_url)
    assert "retried 1 update" in retried


def test_keys_list_has_a_header_row(sqlite_url):
    run("keys", "create", "--tenant", "acme", "--role", "read", "--url", sqlite_url)
    run(
        "keys",
        "create",
        "--tenant",
        "a-much-longer-tenant",
        "--description",
        "bot",
        "--url",
        sqlite_url,
    )
    lines = run("keys", "list", "--url", sqlite_url).splitlines()
    assert lines[0].split()[:4] == ["key", "id", "tenant", "role"]
    assert len(lines) == 3
    # The columns line up under the header.
    column = lines[0].index("role")
    assert {line[column : column + 5].strip() for line in lines[1:]} == {"read", "write"}


def test_no_help_text_is_cut_short(monkeypatch):
    for command in (["serve"], ["worker"], ["keys", "create"], ["db", "upgrade"]):
        text = run(*command, "--help", env={"COLUMNS": "80"})
        assert not re.search(r"…\s*│", text), text  # a cell cut short at its edge
        joined = "".join(text.replace("│", "").split())
        assert "postgresql+psycopg://user@host/db" in joined
        assert "MEMORY_SQL_DATABASE_URL" in joined


def test_an_error_to_a_pipe_is_one_line_however_long(tmp_path):
    missing = tmp_path / ("a-long-folder-name-" * 6) / "nope.db"
    missing.parent.mkdir()
    result = runner.invoke(
        app,
        ["facts", "list", "--user", "alice", "--url", f"sqlite:///{missing}"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and len(result.output) > 80
