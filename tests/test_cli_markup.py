"""Text a user typed (ids, names, categories, file names, fact ids) reaches every ``memory-sql``
message as typed: Rich markup in it (``[/]``, ``[red]x``, ``[bold]x[/bold]``) is never read as
markup. Each command's error path is fed each such text: one clean line, exit 1 (2 for usage
errors, with Typer's panel), no traceback, the text shown literally."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_sql.cli import app

CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}
runner = CliRunner(env=CLEAN_ENV)

NASTY = ["[/]", "[red]x", "[bold]x[/bold]"]

# Each command's error path, with {x} for the text and {tmp} for a folder of the test's own.
ERRORS: dict[str, list[str]] = {
    "facts list --user": ["facts", "list", "--user", "{x}"],
    "facts list --agent": ["facts", "list", "--user", "u", "--agent", "{x}"],
    "facts list --tenant": ["facts", "list", "--user", "u", "--tenant", "{x}"],
    "facts add --user": ["facts", "add", "Likes tea", "--user", "{x}"],
    "facts add --category": ["facts", "add", "Likes tea", "--user", "u", "--category", "{x}"],
    "facts add --agent": ["facts", "add", "Likes tea", "--user", "u", "--agent", "{x}"],
    "facts remove FACT_ID": ["facts", "remove", "--user", "u", "{x}"],
    "facts remove --tenant": ["facts", "remove", "--user", "u", "--tenant", "{x}", "fact_1"],
    "facts search --category": ["facts", "search", "tea", "--category", "{x}"],
    "facts search --user": ["facts", "search", "tea", "--user", "{x}"],
    "report --tenant": ["report", "--tenant", "{x}"],
    "export --user": ["export", "--user", "{x}"],
    "export -o FILE": ["export", "--user", "nobody", "-o", "{tmp}/{x}.json"],
    "export --jsonl FILE": ["export", "--jsonl", "{tmp}/{x}.jsonl", "--tenant", "nobody"],
    "import missing FILE": ["import", "{tmp}/{x}.json", "--user", "u"],
    "import bad FILE": ["import", "{tmp}/bad{x}.json", "--user", "u"],
    "import --user": ["import", "{tmp}/good.json", "--user", "{x}"],
    "import --jsonl missing FILE": ["import", "--jsonl", "{tmp}/{x}.jsonl"],
    "forget --user": ["forget", "--user", "{x}", "--yes"],
    "forget --tenant": ["forget", "--user", "u", "--tenant", "{x}", "--yes"],
    "ingest missing FILE": ["ingest", "{tmp}/{x}.json", "--user", "u", "--no-wait"],
    "ingest bad FILE": ["ingest", "{tmp}/bad{x}.json", "--user", "u", "--no-wait"],
    "ingest --user": ["ingest", "{tmp}/chat.json", "--user", "{x}", "--no-wait"],
    "ingest --agent": ["ingest", "{tmp}/chat.json", "--user", "u", "--agent", "{x}", "--no-wait"],
    "ingest --tenant": ["ingest", "{tmp}/chat.json", "--user", "u", "--tenant", "{x}"],
    "context --user": ["context", "--user", "{x}"],
    "context --agent": ["context", "--user", "u", "--agent", "{x}"],
    "queue list --user": ["queue", "list", "--user", "{x}"],
    "queue list --agent": ["queue", "list", "--agent", "{x}"],
    "queue retry KEY": ["queue", "retry", "{x}"],
    "queue retry THREAD": ["queue", "retry", "default/u/-/{x}"],
    "queue drop KEY": ["queue", "drop", "flush:default/{x}", "--yes"],
    "queue drop THREAD": ["queue", "drop", "default/u/-/{x}", "--yes"],
    "--config FILE": ["facts", "list", "--user", "u", "--config", "{tmp}/{x}.yaml"],
}
# Commands whose --url is the point of the case (the others get the test's database).
URL_ERRORS: dict[str, list[str]] = {
    "db current --url": ["db", "current", "--url", "sqlite:///{tmp}/{x}.db"],
    "db check --url": ["db", "check", "--url", "sqlite:///{tmp}/{x}.db"],
    "db upgrade --url": ["db", "upgrade", "--url", "sqlite:///{tmp}/{x}/no/such/dir.db"],
    "report --url": ["report", "--url", "sqlite:///{tmp}/{x}.db"],
    "worker --config": ["worker", "--config", "{tmp}/{x}.yaml"],
    "demo --url": ["demo", "--url", "sqlite:///{tmp}/{x}/no/such/demo.db"],
}
USAGE_ERRORS: dict[str, list[str]] = {
    "unknown option": ["facts", "list", "--user", "u", "--{x}"],
    "extra argument": ["report", "{x}"],
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Files the cases name: a valid memory.json and chat, and invalid files named with the
    nasty texts."""
    (tmp_path / "good.json").write_text(json.dumps({"facts": []}), encoding="utf-8")
    (tmp_path / "chat.json").write_text(
        json.dumps(
            [{"role": "user", "content": "I use vim"}, {"role": "assistant", "content": "ok"}]
        ),
        encoding="utf-8",
    )
    for text in NASTY:
        (tmp_path / f"bad{text.replace('/', '_')}.json").write_text("{not json", encoding="utf-8")
    return tmp_path


def _args(template: list[str], text: str, folder: Path) -> list[str]:
    args = []
    for arg in template:
        if "{tmp}" in arg:  # a file name cannot hold "/": [/] becomes [_] there
            arg = arg.replace("{tmp}", str(folder)).replace("{x}", text.replace("/", "_"))
        args.append(arg.replace("{x}", text))
    return args


def _shown(template: list[str], text: str) -> str:
    return text.replace("/", "_") if any("{tmp}" in a and "{x}" in a for a in template) else text


def _one_clean_error_line(result, text: str) -> None:
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, output
    assert output.count("\n") == 1 and output.startswith("error: "), output
    assert text in output, output


@pytest.mark.parametrize("text", NASTY)
@pytest.mark.parametrize("case", ERRORS, ids=str)
def test_user_text_in_an_error_is_shown_as_typed(case, text, folder, sqlite_url):
    template = ERRORS[case]
    result = runner.invoke(app, [*_args(template, text, folder), "--url", sqlite_url])
    _one_clean_error_line(result, _shown(template, text))


@pytest.mark.parametrize("text", NASTY)
@pytest.mark.parametrize("case", URL_ERRORS, ids=str)
def test_user_text_in_a_url_or_config_error_is_shown_as_typed(case, text, folder):
    template = URL_ERRORS[case]
    result = runner.invoke(app, _args(template, text, folder))
    _one_clean_error_line(result, _shown(template, text))


@pytest.mark.parametrize("text", NASTY)
@pytest.mark.parametrize("case", USAGE_ERRORS, ids=str)
def test_user_text_in_a_usage_error_is_shown_as_typed(case, text, sqlite_url):
    result = runner.invoke(app, [*_args(USAGE_ERRORS[case], text, Path()), "--url", sqlite_url])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert text in result.output, result.output


@pytest.mark.parametrize("text", NASTY)
def test_user_text_in_a_success_message_is_shown_as_typed(text, sqlite_url):
    added = runner.invoke(
        app, ["facts", "add", f"Likes {text}", "--user", "u", "--url", sqlite_url]
    )
    assert added.exit_code == 0, added.output
    assert f"Likes {text}" in added.output
    fact_id = added.output.split()[1]
    listed = runner.invoke(app, ["facts", "list", "--user", "u", "--url", sqlite_url])
    assert listed.exit_code == 0 and f"Likes {text}" in listed.output, listed.output
    removed = runner.invoke(app, ["facts", "remove", fact_id, "--user", "u", "--url", sqlite_url])
    assert removed.exit_code == 0 and f"Likes {text}" in removed.output, removed.output


def test_a_category_error_shows_the_pattern(sqlite_url):
    result = runner.invoke(
        app,
        ["facts", "add", "Likes tea", "--user", "u", "--category", "no such", "--url", sqlite_url],
    )
    _one_clean_error_line(result, "^[a-z0-9_-]{1,32}$")
