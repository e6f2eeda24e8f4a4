"""Every ``memory-sql`` command, found by walking the app, has help that shows an example."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from memory_sql.cli import app

runner = CliRunner()


def command_paths() -> list[tuple[str, ...]]:
    """The path of every leaf command (``("db", "upgrade")``, ``("ingest",)``, …)."""
    found: list[tuple[str, ...]] = []

    def walk(command: object, path: tuple[str, ...]) -> None:
        children = getattr(command, "commands", None)
        if children is None:
            found.append(path)
            return
        for name, child in sorted(children.items()):
            walk(child, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_the_commands_of_issue_7_are_registered():
    paths = {" ".join(p) for p in command_paths()}
    expected = {"db upgrade", "db current", "db check", "ingest", "context", "worker", "demo"}
    assert expected <= paths, sorted(paths)


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_command_has_help_with_an_example(path):
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output, result.output
    assert "memory-sql " + " ".join(path) in result.output
