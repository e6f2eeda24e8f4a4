"""A real ``memory-sql serve`` in a subprocess on a free 127.0.0.1 port, for the service tests
and ``benchmarks/bench_service.py``: started with a YAML config of the caller's, stopped with
SIGTERM."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from pg_cluster import free_port
from worker_process import CommandProcess

STARTUP_SECONDS = 30.0


class ServiceProcess(CommandProcess):
    """``memory-sql serve`` with ``settings`` (MemoryConfig keys) as its config file."""

    def __init__(
        self,
        folder: Path,
        settings: dict[str, Any],
        *,
        with_worker: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = folder / f"service-{self.port}.yaml"
        config.write_text(yaml.safe_dump({"memory": settings}), encoding="utf-8")
        command = [
            "serve",
            "--port",
            str(self.port),
            "--config",
            str(config),
            "--with-worker" if with_worker else "--no-worker",
        ]
        super().__init__(command, folder / f"service-{self.port}.log", env)
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"memory-sql serve exited {self.process.returncode}: {self.log}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"memory-sql serve did not answer within {STARTUP_SECONDS} s: {self.log}"
        )

    def client(self, key: str | None = None, **headers: str) -> httpx.Client:
        sent = dict(headers)
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        return httpx.Client(base_url=self.base_url, headers=sent, timeout=30.0)
