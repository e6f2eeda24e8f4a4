"""``memory-sql`` commands in subprocesses, as operators run them: :class:`CommandProcess` (its
output in a log file, stopped with SIGTERM) and :class:`WorkerProcess`, a ``memory-sql worker``
of the README's separate-worker layout, started with a YAML config of the caller's and ready
once it says so. Used by the wake-up tests, the service tests (``server/service_process.py``)
and ``benchmarks/bench_queue.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

import yaml

STARTUP_SECONDS = 30.0
P = TypeVar("P", bound="CommandProcess")


class CommandProcess:
    """``memory-sql ARGS`` in a subprocess, stdout and stderr in ``log_path``, with no
    ``MEMORY_SQL_*`` variable of the caller's (``env`` adds variables)."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_SQL_")}
        environment.update(env or {})
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memory_sql", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=environment,
        )

    @property
    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def __enter__(self: P) -> P:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class WorkerProcess(CommandProcess):
    """``memory-sql worker --config …`` with ``settings`` (MemoryConfig keys) as the config."""

    def __init__(self, folder: Path, settings: dict[str, Any], *, name: str = "worker") -> None:
        config = folder / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"memory": settings}), encoding="utf-8")
        super().__init__(
            ["worker", "--config", str(config)],
            folder / f"{name}.log",
            {"COLUMNS": "200", "NO_COLOR": "1"},
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while "worker started" not in self.log:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"memory-sql worker did not start: {self.log}")
            time.sleep(0.05)
