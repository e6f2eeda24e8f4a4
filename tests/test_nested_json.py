"""JSON nested deeper than Python's parser goes (``[[[[…]]]]``) is bad input like any other:
400 from ``POST /v1/import`` and ``POST /v1/conversations``, one line and no traceback from
``memory-sql import --jsonl``, ``import FILE`` and ``ingest``; nothing stored changes."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

from memory_sql import migrations, open_storage
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key

DEPTH = 100_000
DEEP = "[" * DEPTH + "]" * DEPTH


@pytest.fixture
def url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    migrations.upgrade(url)
    return url


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_SQL_")}
    return subprocess.run(
        [sys.executable, "-m", "memory_sql", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )


def one_line_no_traceback(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "content",
    [
        '{"user_id": "u1", "memory": ' + DEEP + "}\n",  # deep inside a line
        DEEP + "\n",  # a line that is all nesting
    ],
)
def test_import_jsonl_of_deeply_nested_json_is_one_line(url, tmp_path, content):
    path = tmp_path / "export.jsonl"
    path.write_text(content)
    line = one_line_no_traceback(cli("import", "--jsonl", str(path), "--url", url))
    assert "nested too deeply" in line and "export.jsonl" in line


def test_import_file_of_deeply_nested_json_is_one_line(url, tmp_path):
    path = tmp_path / "memory.json"
    path.write_text('{"facts": ' + DEEP + "}")
    line = one_line_no_traceback(cli("import", str(path), "--user", "u1", "--url", url))
    assert "nested too deeply" in line
    assert open_storage(url).load(user_id="u1").version == 0  # nothing written


def test_ingest_of_deeply_nested_json_skips_it_in_one_line(url, tmp_path):
    path = tmp_path / "conversation.json"
    path.write_text('{"messages": ' + DEEP + "}")
    result = cli("ingest", str(path), "--user", "u1", "--url", url, "--no-wait")
    assert "Traceback" not in result.stderr + result.stdout
    assert result.returncode == 1
    assert "nested too deeply" in result.stderr


def test_the_service_answers_400_to_deeply_nested_bodies(tmp_path, url, llm):
    engine = create_engine(url)
    key = create_key(engine, tenant_id="acme", role="write")[1]
    engine.dispose()
    settings = {**service_settings_for(llm), "storage": url}
    with ServiceProcess(tmp_path, settings) as service, service.client(key) as http:
        imported = http.post(
            "/v1/import",
            content=('{"user_id": "u1", "memory": ' + DEEP + "}\n").encode(),
            headers={"Content-Type": "application/x-ndjson"},
        )
        posted = http.post(
            "/v1/conversations",
            content=('{"user_id": "u1", "thread_id": "t", "messages": ' + DEEP + "}").encode(),
            headers={"Content-Type": "application/json"},
        )
        assert httpx.get(f"{service.base_url}/healthz").status_code == 200
        log = service.log
    assert imported.status_code in (400, 422), imported.text
    assert "nested too deeply" in imported.json()["error"]["message"]
    assert posted.status_code == 400, posted.text  # FastAPI's own "error parsing the body"
    assert "Traceback" not in log
