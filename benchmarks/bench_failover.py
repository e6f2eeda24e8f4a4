"""Failover at load, and reads from a replica (docs/replication.md).

    .venv/bin/python benchmarks/bench_failover.py [sync] [async] [patroni] [reads]

1. sync / async: a real ``memory-sql serve`` (its worker on) on a libpq multi-host URL
   (``target_session_attrs=read-write``) of a private primary and its streaming standby
   (``tests/pg_replication.py``), synchronous or asynchronous; 16 clients post conversations;
   the primary is SIGKILLed and the standby promoted (``pg_promote``). Acknowledged (202),
   lost, learned twice, and the seconds from the promotion to the first read answered.
2. patroni: the same with a real failover manager: two Patroni 3 nodes with etcd 3
   (``synchronous_mode``), the leader's node lost (Patroni and PostgreSQL SIGKILLed); Patroni
   promotes the other once the leader key expires. Its configuration is the one
   docs/replication.md gives.
3. reads: the context's p50 served by a streaming standby (``replicas.url``) against the
   primary's, both through the service, interleaved.

Everything runs on 127.0.0.1 with a scripted chat-completions server. Exits 1 when an
acknowledged conversation is lost or learned twice with synchronous replication.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import contextlib

from llm_server import ScriptedLLM
from pg_cluster import SERVER_USER, find_bindir, free_port
from pg_replication import ReplicatedPair
from server.conftest import service_settings_for
from server.failover_run import prepare, run_failover
from server.service_process import ServiceProcess

from memory_sql import migrations

failures: list[str] = []


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def failover(synchronous: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory() as folder,
        ScriptedLLM() as llm,
        ReplicatedPair(synchronous=synchronous) as pair,
    ):
        pair.create_database("memory")
        url = pair.failover_url("memory")
        migrations.upgrade(url)

        def fail() -> float:
            pair.primary.kill()
            figures["promote (s)"] = round(pair.promote(), 2)
            return time.monotonic()

        figures.update(
            run_failover(Path(folder), llm, url, lambda: pair.standby_url("memory"), fail)
        )
    return figures


# --- Patroni ---------------------------------------------------------------------------------


def patroni_config(
    name: str, folder: Path, pg_port: int, api_port: int, etcd_port: int, bindir: str
) -> dict[str, Any]:
    """A Patroni node's configuration (docs/replication.md shows it for an operator)."""
    return {
        "scope": "memory-sql",
        "name": name,
        "restapi": {
            "listen": f"127.0.0.1:{api_port}",
            "connect_address": f"127.0.0.1:{api_port}",
        },
        "etcd3": {"hosts": f"127.0.0.1:{etcd_port}"},
        "bootstrap": {
            "dcs": {
                "ttl": 10,
                "loop_wait": 1,
                "retry_timeout": 4,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "parameters": {
                        "wal_level": "replica",
                        "max_wal_senders": 5,
                        "hot_standby": "on",
                        "synchronous_commit": "on",
                        "fsync": "off",  # a benchmark on one machine; never in production
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, "no-locale"],
            "pg_hba": [
                "host replication postgres 127.0.0.1/32 trust",
                "host all all 127.0.0.1/32 trust",
                "local all all trust",
            ],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{pg_port}",
            "connect_address": f"127.0.0.1:{pg_port}",
            "data_dir": str(folder / name / "data"),
            "bin_dir": bindir,
            "pgpass": str(folder / name / "pgpass"),
            "authentication": {
                "superuser": {"username": SERVER_USER},
                "replication": {"username": SERVER_USER},
            },
            "parameters": {"unix_socket_directories": str(folder / name)},
        },
    }


class PatroniPair:
    """etcd and two Patroni nodes, run as the ``postgres`` OS user when we are root."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.user = pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None
        bindir = find_bindir()
        assert bindir is not None
        etcd_port, peer_port = free_port(), free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._own(folder)
        self.processes["etcd"] = self._spawn(
            "etcd",
            [
                "etcd",
                "--name",
                "etcd0",
                "--data-dir",
                str(folder / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"etcd0=http://127.0.0.1:{peer_port}",
            ],
        )
        self.nodes: dict[str, tuple[int, int]] = {}
        for name in ("node0", "node1"):
            pg_port, api_port = free_port(), free_port()
            self.nodes[name] = (pg_port, api_port)
            (folder / name).mkdir()
            self._own(folder / name)
            config = patroni_config(name, folder, pg_port, api_port, etcd_port, str(bindir))
            path = folder / f"{name}.yml"
            path.write_text(yaml.safe_dump(config), encoding="utf-8")
            self._own(path)
        self.config_text = (folder / "node0.yml").read_text(encoding="utf-8")
        self.processes["node0"] = self._spawn("node0", ["patroni", str(folder / "node0.yml")])
        self.wait_for("node0", "primary", 90)

    def start_replica(self) -> None:
        self.processes["node1"] = self._spawn("node1", ["patroni", str(self.folder / "node1.yml")])
        self.wait_for("node1", "replica", 120)

    def url(self, database: str) -> str:
        hosts = ",".join(f"127.0.0.1:{pg}" for pg, _api in self.nodes.values())
        return (
            f"postgresql+psycopg://{SERVER_USER}@{hosts}/{database}?target_session_attrs=read-write"
        )

    def role_is(self, name: str, role: str) -> bool:
        try:
            answer = httpx.get(f"http://127.0.0.1:{self.nodes[name][1]}/{role}", timeout=1.0)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    def wait_for(self, name: str, role: str, timeout: float) -> float:
        start = time.monotonic()
        while not self.role_is(name, role):
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"{name} is not {role} after {timeout:.0f}s: {self.logs()}")
            time.sleep(0.05)
        return time.monotonic() - start

    def lose(self, name: str) -> None:
        """The node is lost: its Patroni and its PostgreSQL are SIGKILLed."""
        patroni = self.processes[name]
        postgres = _postmasters(self.folder / name / "data")
        for pid in [*_descendants(patroni.pid), patroni.pid, *postgres]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        patroni.wait(10)

    def logs(self) -> str:
        return "".join(
            f"\n--- {name} ---\n"
            + (self.folder / f"{name}.log").read_text(errors="replace")[-3000:]
            for name in self.processes
        )

    def close(self) -> None:
        for name in ("node1", "node0", "etcd"):
            process = self.processes.get(name)
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    self.lose(name) if name != "etcd" else process.kill()
        for name in ("node0", "node1"):
            for pid in _postmasters(self.folder / name / "data"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _own(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        if self.user is not None:
            argv = ["runuser", "-u", self.user.pw_name, "--", *argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.pop("PYTHONPATH", None)
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115
        return subprocess.Popen(
            argv,
            cwd=self.folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _postmasters(data: Path) -> list[int]:
    try:
        return [int(Path(data / "postmaster.pid").read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if len(fields) > 1 and fields[1] == str(pid):
                found += [int(entry.name), *_descendants(int(entry.name))]
    return found


def patroni() -> dict[str, Any]:
    if shutil.which("patroni") is None or shutil.which("etcd") is None:
        return {"skipped": "patroni or etcd is not installed"}
    folder = Path(tempfile.mkdtemp(prefix="memory_sql_patroni_", dir="/dev/shm"))
    os.chmod(folder, 0o755)
    cluster = None
    figures: dict[str, Any] = {}
    try:
        cluster = PatroniPair(folder)
        import psycopg

        pg0 = cluster.nodes["node0"][0]
        with psycopg.connect(host="127.0.0.1", port=pg0, user=SERVER_USER, autocommit=True) as c:
            c.execute("CREATE DATABASE memory")
        cluster.start_replica()
        url = cluster.url("memory")
        migrations.upgrade(url)

        def fail() -> float:
            lost = time.monotonic()
            cluster.lose("node0")
            figures["loss to promotion (s)"] = round(cluster.wait_for("node1", "primary", 60), 2)
            _ = lost
            return time.monotonic()

        pg1 = cluster.nodes["node1"][0]
        with ScriptedLLM() as llm:
            figures.update(
                run_failover(
                    folder,
                    llm,
                    url,
                    lambda: f"postgresql+psycopg://{SERVER_USER}@127.0.0.1:{pg1}/memory",
                    fail,
                )
            )
    except Exception as exc:
        figures["error"] = repr(exc)
        if cluster is not None:
            figures["logs"] = cluster.logs()[-4000:]
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(folder, ignore_errors=True)
    return figures


# --- reads from a replica ------------------------------------------------------------------


def reads(requests: int = 400) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as folder,
        ScriptedLLM() as llm,
        ReplicatedPair(synchronous=False) as pair,
    ):
        url = pair.create_database("memory")
        migrations.upgrade(url)
        key = prepare(url)
        base = {**service_settings_for(llm), "storage": url}
        replica = {**base, "replicas": {"url": pair.standby_url("memory")}}
        with (
            ServiceProcess(Path(folder), base, with_worker=False) as on_primary,
            ServiceProcess(Path(folder), replica, with_worker=False) as on_replica,
            on_primary.client(key) as primary_http,
            on_replica.client(key) as replica_http,
        ):
            for n in range(40):
                fact = {"content": f"Fact number {n} about the user's work and tools"}
                assert primary_http.post("/v1/users/u1/facts", json=fact).status_code == 201
            pair.wait_for_replay()
            times: dict[str, list[float]] = {"primary": [], "replica": []}
            path = "/v1/users/u1/context?q=work%20tools"
            for http in (primary_http, replica_http):  # warm both
                for _ in range(20):
                    http.get(path)
            for _ in range(requests):
                for name, http in (("primary", primary_http), ("replica", replica_http)):
                    start = time.perf_counter()
                    assert http.get(path).status_code == 200
                    times[name].append(time.perf_counter() - start)
            served = replica_http.get("/metrics").text
    p50 = {name: statistics.median(values) * 1000 for name, values in times.items()}
    replica_reads = [
        line for line in served.splitlines() if line.startswith("memory_sql_reads_total")
    ]
    return {
        "primary p50 (ms)": round(p50["primary"], 2),
        "replica p50 (ms)": round(p50["replica"], 2),
        "replica / primary": round(p50["replica"] / p50["primary"], 2),
        "served": replica_reads,
    }


def main() -> int:
    chosen = sys.argv[1:] or ["sync", "async", "patroni", "reads"]
    for part in chosen:
        before = loadavg()
        if part in ("sync", "async"):
            figures = failover(part == "sync")
        elif part == "patroni":
            figures = patroni()
        elif part == "reads":
            figures = reads()
        else:
            print(f"unknown part {part!r}", file=sys.stderr)
            return 2
        print(f"{part}: {json.dumps(figures, default=str)}")
        print(f"   load average before {before}, after {loadavg()}")
        checked = part in ("sync", "patroni") and "lost" in figures
        if checked and (figures["lost"] or figures["twice"]):
            failures.append(f"{part}: lost {figures['lost']}, twice {figures['twice']}")
    if failures:
        print("WRONG:", failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
