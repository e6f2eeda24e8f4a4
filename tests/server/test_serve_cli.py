"""``memory-sql serve`` refuses a database it cannot serve in one line, before serving."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pg_cluster import free_port


@pytest.mark.parametrize(
    ("target", "named"),
    [
        ("{tmp}/a-folder", "needs a SQL database"),
        ("postgresql://postgres@127.0.0.1:{closed}/none", "connection refused"),
        ("sqlite:///{tmp}/missing/memory.db", "cannot open the SQLite file"),
    ],
)
def test_a_database_that_cannot_be_served_is_one_line_and_exit_1(tmp_path, target, named):
    url = target.format(tmp=tmp_path, closed=free_port())
    result = subprocess.run(
        [sys.executable, "-m", "memory_sql", "serve", "--url", url, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
