"""What ``memory-sql`` says, and how it exits: usage errors (Typer's panel, exit 2), ``--version``,
connection errors named by what was being done, file errors without ``[Errno …]``, singular
counts, help without type placeholders or stray line breaks, the activity chart's legend, and
the documentation's examples and LICENSE agreeing with the code."""

from __future__ import annotations

import json
import os
import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
import typer.main
from test_cli_help import command_paths
from typer.testing import CliRunner

from memory_sql import migrations, open_storage
from memory_sql.cli import app
from memory_sql.database import create_engine
from memory_sql.errors import StorageError

ROOT = Path(__file__).resolve().parent.parent
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}
runner = CliRunner(env=CLEAN_ENV)
wide = CliRunner(env={**CLEAN_ENV, "COLUMNS": "200", "TERMINAL_WIDTH": "200"})
REFUSED = "postgresql+psycopg://postgres@127.0.0.1:1/nothing_listens_here"


def _command(path: tuple[str, ...]):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


# usage errors -----------------------------------------------------------------------------------

USAGE_ERRORS = {
    "--confidence high": ["facts", "add", "Likes tea", "--user", "u", "--confidence", "high"],
    "--timeout 0": ["ingest", "chat.json", "--user", "u", "--timeout", "0"],
    "--workers 0": ["worker", "--workers", "0"],
    "--top -1": ["report", "--top", "-1"],
    "--days 0": ["report", "--days", "0"],
    "missing --user": ["facts", "list"],
}


@pytest.mark.parametrize("args", USAGE_ERRORS.values(), ids=USAGE_ERRORS.keys())
def test_a_usage_error_shows_typers_panel_and_exits_2(args, tmp_path):
    result = runner.invoke(app, [*args, "--url", f"sqlite:///{tmp_path / 'm.db'}"])
    assert result.exit_code == 2, result.output
    assert "Usage: memory-sql" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # refused before anything was opened


def test_report_top_names_its_own_option():
    result = runner.invoke(app, ["report", "--top", "-1"])
    assert result.exit_code == 2
    assert "--top" in result.output and "largest" not in result.output, result.output


def test_the_docs_say_how_failures_and_usage_errors_exit():
    readme = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert "one red `error:` line and exits with status 1" in readme
    assert "prints Typer's usage panel and exits with status 2" in readme


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"memory-sql {metadata.version('memory-sql')}\n"


# errors -----------------------------------------------------------------------------------------

REFUSED_COMMANDS = {
    "db upgrade": ["db", "upgrade"],
    "db current": ["db", "current"],
    "db check": ["db", "check"],
    "facts list": ["facts", "list", "--user", "u"],
    "facts add": ["facts", "add", "Likes tea", "--user", "u"],
    "facts search": ["facts", "search", "tea"],
    "report": ["report"],
    "export": ["export", "--user", "u"],
    "import": ["import", "{tmp}/memory.json", "--user", "u"],
    "forget": ["forget", "--user", "u", "--yes"],
    "context": ["context", "--user", "u"],
    "ingest": ["ingest", "{tmp}/chat.json", "--user", "u", "--no-wait"],
}


@pytest.mark.parametrize("args", REFUSED_COMMANDS.values(), ids=REFUSED_COMMANDS.keys())
def test_a_refused_connection_is_one_line_naming_what_was_done(args, tmp_path):
    (tmp_path / "memory.json").write_text(json.dumps({"facts": []}), encoding="utf-8")
    chat = [{"role": "user", "content": "I use vim"}, {"role": "assistant", "content": "Noted"}]
    (tmp_path / "chat.json").write_text(json.dumps(chat), encoding="utf-8")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = runner.invoke(app, [*args, "--url", REFUSED])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: "), result.output
    assert "connection refused" in result.output
    assert "migrations" not in result.output


def test_a_failed_migration_says_it_was_migrating():
    engine = create_engine(REFUSED)
    try:
        with pytest.raises(StorageError, match=r"^migrating the schema to head: database "):
            migrations.upgrade(engine)
    finally:
        engine.dispose()


def test_importing_a_missing_file_names_it_without_errno(tmp_path, sqlite_url):
    missing = tmp_path / "nonexist.json"
    for args in (["import", str(missing), "--user", "u"], ["import", "--jsonl", str(missing)]):
        result = runner.invoke(app, [*args, "--url", sqlite_url])
        assert result.exit_code == 1, result.output
        assert result.output == f"error: {missing}: No such file or directory\n"


# counts -----------------------------------------------------------------------------------------


def test_one_of_a_thing_is_singular(tmp_path, sqlite_url):
    added = runner.invoke(app, ["facts", "add", "Likes tea", "--user", "u", "--url", sqlite_url])
    assert added.exit_code == 0, added.output
    target = tmp_path / "memory.json"
    exported = runner.invoke(app, ["export", "--user", "u", "-o", str(target), "--url", sqlite_url])
    assert exported.exit_code == 0, exported.output
    assert "1 fact)" in exported.output and "1 facts" not in exported.output
    report = wide.invoke(app, ["report", "--days", "1", "--url", sqlite_url])
    assert report.exit_code == 0, report.output
    assert "1 fact in 1 memory;" in report.output, report.output
    assert re.search(r"Fact changes, last 1 day\s*\n", report.output), report.output
    found = runner.invoke(app, ["facts", "search", "tea", "--url", sqlite_url])
    assert "1 fact found" in found.output, found.output
    jsonl = tmp_path / "all.jsonl"
    runner.invoke(app, ["export", "--jsonl", str(jsonl), "--url", sqlite_url])
    imported = runner.invoke(app, ["import", "--jsonl", str(jsonl), "--url", sqlite_url])
    assert "imported 1 memory from" in imported.output, imported.output


# help -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_help_shows_no_placeholders_flag_types_or_stray_line_breaks(path):
    result = wide.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert not re.search(r"\{\w+\}", usage), usage
    assert "<bool>" not in result.output, result.output
    for paragraph in _command(path).help.split("\n\n"):
        if "[bold]" in paragraph:  # an example: its commands, one a line, indented
            for line in paragraph.splitlines()[1:]:
                command = re.sub(r"\[/?bold\]", "", line).strip().replace("\\[", "[")
                assert f"   {command}" in result.output, (command, result.output)
        elif len(paragraph) < 180:  # a paragraph shown on one line of a wide terminal
            assert paragraph in result.output, (paragraph, result.output)


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_option_and_argument_has_help(path):
    command = _command(path)
    missing = [p.name for p in command.params if not getattr(p, "help", None)]
    assert not missing, f"{' '.join(path)}: no help for {missing}"


def test_the_activity_chart_has_a_legend_and_tells_removals_by_their_glyph(sqlite_url):
    storage = open_storage(sqlite_url)
    try:
        from memory_sql import Fact

        doc = storage.load(user_id="u")
        doc.facts.extend(Fact(content=f"Fact {n}", category="context") for n in range(3))
        storage.save(doc, user_id="u", expected_version=doc.version)
        doc = storage.load(user_id="u")
        doc.facts.pop()
        storage.save(doc, user_id="u", expected_version=doc.version)
    finally:
        storage.close()
    result = wide.invoke(app, ["report", "--days", "2", "--url", sqlite_url])
    assert result.exit_code == 0, result.output
    assert "█ added  ░ removed" in result.output, result.output
    assert any("█" in line and "░" in line for line in result.output.splitlines())


# docs and LICENSE -------------------------------------------------------------------------------


def _readme_command(prefix: str) -> list[str]:
    for line in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"$ memory-sql {prefix} "):
            return shlex.split(line.removeprefix("$ memory-sql "), comments=True)
    raise AssertionError(f"no `memory-sql {prefix}` line in docs/cli.md")


def test_the_docs_facts_add_shows_up_in_its_facts_list(sqlite_url):
    added = runner.invoke(app, [*_readme_command("facts add"), "--url", sqlite_url])
    assert added.exit_code == 0, added.output
    listed = runner.invoke(app, [*_readme_command("facts list"), "--url", sqlite_url])
    assert listed.exit_code == 0, listed.output
    assert "Prefers tabs" in listed.output, listed.output


def test_the_license_is_the_mit_license_pyproject_declares():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "memory_sql authors" in text
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "MIT"$', pyproject, re.M)


def test_plural():
    from memory_sql.cli._common import plural

    assert [plural(1, "fact"), plural(2, "fact"), plural(0, "fact")] == [
        "1 fact",
        "2 facts",
        "0 facts",
    ]
    assert [plural(1, "memory"), plural(3, "memory"), plural(2, "day")] == [
        "1 memory",
        "3 memories",
        "2 days",
    ]
