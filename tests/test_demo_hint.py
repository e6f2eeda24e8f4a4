"""The demo's closing hint ("Try: … context …") runs as printed, also when ``memory-sql`` is
not on ``PATH`` (after ``make demo``, before ``source .venv/bin/activate``). The installed
command in subprocesses, on a real SQLite file, offline (recorded model answers)."""

from __future__ import annotations

import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memory_sql import Fact, open_storage

ROOT = Path(__file__).resolve().parent.parent


def environment(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whatever is installed
    env["PATH"] = path
    return env


@pytest.mark.parametrize("on_path", [False, True], ids=["not-on-path", "on-path"])
def test_the_demos_hint_runs_as_printed(tmp_path, on_path):
    bin_dir = str(Path(sys.executable).parent)
    others = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != bin_dir]
    path = os.pathsep.join(([bin_dir] if on_path else []) + others)
    env = environment(path)
    demo = subprocess.run(
        [sys.executable, "-m", "memory_sql", "demo", "--url", "sqlite:///demo.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    (hint,) = [line for line in demo.stdout.splitlines() if "Try: " in line]
    command = hint.split("Try: ", 1)[1]
    words = shlex.split(command)
    if on_path:
        assert words[0] == "memory-sql", hint
    else:
        assert words[0] != "memory-sql" and words[0].endswith("memory-sql"), hint
    tried = subprocess.run(
        command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert tried.returncode == 0, tried.stdout + tried.stderr
    assert "<user_memory>" in tried.stdout and "PostgreSQL" in tried.stdout


def _demo(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_sql", "demo", "--url", url],
        cwd=tmp_path,
        env=environment(os.environ.get("PATH", "")),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_demo_deletes_no_file_that_is_not_its_own(tmp_path):
    """The demo recreates its SQLite file, and refuses a file of other data, a memory_sql
    database of other users, or a database that is not a SQLite file: nothing is deleted."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    refused = _demo(tmp_path, f"sqlite:///{other}")
    assert refused.returncode != 0
    assert "is not a memory_sql demo database; not deleting it" in refused.stderr + refused.stdout
    with sqlite3.connect(other) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]

    theirs = tmp_path / "theirs.db"
    with open_storage(f"sqlite:///{theirs}") as storage:
        doc = storage.load(user_id="alice-not-a-demo-user")
        doc.facts = [Fact(content="Keeps bees")]
        storage.save(doc, user_id="alice-not-a-demo-user")
    refused = _demo(tmp_path, f"sqlite:///{theirs}")
    assert refused.returncode != 0
    assert "holds the memories of other users (alice-not-a-demo-user" in " ".join(
        (refused.stderr + refused.stdout).split()
    )
    with open_storage(f"sqlite:///{theirs}") as storage:
        assert [f.content for f in storage.load(user_id="alice-not-a-demo-user").facts] == [
            "Keeps bees"
        ]

    refused = _demo(tmp_path, "postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert refused.returncode != 0
    assert "the demo recreates a SQLite file" in refused.stderr + refused.stdout
