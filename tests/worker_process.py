"""A real ``memory-sql worker`` in a subprocess, as the README's separate-worker layout runs it:
started with a YAML config of the caller's, ready once it says so, stopped with SIGTERM. Used
by the wake-up tests and ``benchmarks/bench_queue.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

STARTUP_SECONDS = 30.0


class WorkerProcess:
    """``memory-sql worker --config …`` with ``settings`` (MemoryConfig keys) as the config."""

    def __init__(self, folder: Path, settings: dict[str, Any], *, name: str = "worker") -> None:
        config = folder / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"memory": settings}), encoding="utf-8")
        self.log_path = folder / f"{name}.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_SQL_")}
        environment.update({"COLUMNS": "200", "NO_COLOR": "1"})
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memory_sql", "worker", "--config", str(config)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while "worker started" not in self.log:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"memory-sql worker did not start: {self.log}")
            time.sleep(0.05)

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

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
