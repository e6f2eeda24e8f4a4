"""``memory-sql db …`` and ``demo`` through Typer's runner, and migrations from a built wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_sql import migrations
from memory_sql.cli import app
from memory_sql.database import create_engine

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        (tmp_path / "cli.db").touch()  # an empty file is an empty SQLite database
        return f"sqlite:///{tmp_path / 'cli.db'}"
    return request.getfixturevalue("new_pg_database")().render_as_string(hide_password=False)


def test_upgrade_current_check(empty_url):
    result = runner.invoke(app, ["db", "current", "--url", empty_url])
    assert result.exit_code == 0, result.output
    assert "revision none" in result.output and "memory-sql db upgrade" in result.output

    result = runner.invoke(app, ["db", "check", "--url", empty_url])
    assert result.exit_code == 1
    assert "memory-sql db upgrade" in result.output

    result = runner.invoke(app, ["db", "upgrade", "--url", empty_url])
    assert result.exit_code == 0, result.output
    assert f"to {migrations.head_revision()}" in result.output

    result = runner.invoke(app, ["db", "upgrade", "--url", empty_url])
    assert "already at revision" in result.output

    result = runner.invoke(app, ["db", "check", "--url", empty_url])
    assert result.exit_code == 0, result.output
    assert "no drift" in result.output


def test_url_comes_from_the_environment(tmp_path):
    url = f"sqlite:///{tmp_path / 'env.db'}"
    result = runner.invoke(app, ["db", "upgrade"], env={"MEMORY_SQL_DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    engine = create_engine(url)
    try:
        assert migrations.current_revision(engine) == migrations.head_revision()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@localhost/x", "unsupported database 'mysql'"),
        ("postgresql+psycopg://postgres@127.0.0.1:1/none", "127.0.0.1:1"),
    ],
)
def test_bad_databases_give_one_line_errors(url, message):
    result = runner.invoke(app, ["db", "upgrade", "--url", url])
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_every_command_has_help_with_an_example():
    for args in (["db", "upgrade"], ["db", "current"], ["db", "check"], ["demo"]):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0
        assert "Example:" in result.output and "memory-sql" in result.output, args


@pytest.mark.slow
def test_migrations_run_from_an_installed_wheel(tmp_path):
    """The wheel carries the migrations: upgrade works with no source checkout in sight."""
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("memory_sql-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "memory_sql/_alembic/env.py" in names
    assert "memory_sql/demo/recorded_responses.json" in names  # the demo works installed
    assert any(n.startswith("memory_sql/_alembic/versions/0001_") for n in names)

    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    url = f"sqlite:///{elsewhere / 'wheel.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import memory_sql, sys; print(memory_sql.__file__); "
            "from memory_sql.cli import main; sys.argv=['memory-sql','db','upgrade','--url',"
            f"{url!r}]; main()",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(site))
    assert f"to {migrations.head_revision()}" in done.stdout
