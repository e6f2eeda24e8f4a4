"""``keys``, ``serve`` and ``worker`` find the same database through the same config, and say
at start which one they serve (its password hidden); the worker's log to a file is one line a
record. A real ``memory-sql serve`` and ``memory-sql worker`` in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import yaml
from typer.testing import CliRunner

from memory_sql.cli import app
from server.service_process import ServiceProcess

CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}


def test_a_key_made_with_the_config_works_against_serve_with_it(
    tmp_path, service_settings, database_url, monkeypatch
):
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)  # where ./memory_sql.db would land
    if database_url.startswith("postgresql"):
        # A password in the URL (trust auth ignores it): the log must not show it.
        service_settings["storage"] = database_url.replace("postgres@", "postgres:s3cr3t-pw@", 1)
    service = ServiceProcess(tmp_path, service_settings, with_worker=False)
    try:
        config = tmp_path / f"service-{service.port}.yaml"
        made = CliRunner(env=CLEAN_ENV).invoke(
            app, ["keys", "create", "--tenant", "acme", "--config", str(config)]
        )
        assert made.exit_code == 0, made.output
        secret = made.output.strip().splitlines()[-1]
        with service.client(secret) as client:
            answer = client.get("/v1/users/alice/context")
        assert answer.status_code == 200, answer.text
        assert list(work.iterdir()) == []  # not ./memory_sql.db
        log = service.log
    finally:
        service.stop()
    (line,) = [line for line in log.splitlines() if "serving database" in line]
    assert f"on http://127.0.0.1:{service.port}" in line and "no worker" in line
    if database_url.startswith("sqlite"):
        assert database_url in line
    else:
        assert "s3cr3t-pw" not in log and "postgres:***@127.0.0.1" in line


def test_the_worker_names_its_database_and_logs_one_line_a_record_to_a_file(tmp_path):
    database = tmp_path / "worker.db"
    config = tmp_path / "config.yaml"
    # No model: the worker warns, in a line longer than any terminal's 80 columns.
    config.write_text(
        yaml.safe_dump({"memory": {"storage": f"sqlite:///{database}", "workers": 1}}),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["MEMORY_SQL_CONFIG"] = str(config)
    env["COLUMNS"] = "80"
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "memory_sql", "worker", "--status-every", "0.2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 30
            while b"no memory LLM model" not in log_path.read_bytes():
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    text = log_path.read_text(encoding="utf-8")
    assert process.returncode == 0, text
    (started,) = [line for line in text.splitlines() if line.startswith("worker started")]
    assert f"database sqlite:///{database}" in started
    (warning,) = [line for line in text.splitlines() if "no memory LLM model" in line]
    assert "WARNING memory_sql.service:" in warning
    assert "OPENAI_MODEL" in warning and warning.rstrip().endswith("shows them)")
    assert len(warning) > 80
