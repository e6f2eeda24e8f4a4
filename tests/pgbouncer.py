"""A real PgBouncer in transaction-pooling mode in front of the test PostgreSQL server, started
on a free port in a folder of its own (``PgBouncer(server_url)``, a context manager).

Every database of the server is reachable through it (``* = host=… port=…``), as the user the
client names (``auth_type = trust``: the server's own ``pg_hba`` decides). Its server
connections are closed after a second idle, so that a test database can be dropped soon after.
Run as root, it runs as the OS user ``postgres`` (PgBouncer refuses to run as root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from tempfile import mkdtemp

import psycopg
from sqlalchemy.engine import URL, make_url

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """PgBouncer (``pool_mode = transaction``) in front of ``server``'s host and port."""

    def __init__(self, server: URL | str, *, pool_size: int = 20) -> None:
        if PGBOUNCER is None:
            raise FileNotFoundError("pgbouncer is not installed")
        self.server = make_url(server) if isinstance(server, str) else server
        self.port = free_port()
        self.folder = Path(mkdtemp(prefix="pgbouncer-"))
        self.pool_size = pool_size
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, direct: URL | str) -> str:
        """``direct`` (a database of the server) reached through this PgBouncer, marked for
        transaction pooling."""
        parsed = make_url(direct) if isinstance(direct, str) else direct
        through = parsed.set(host="127.0.0.1", port=self.port).update_query_dict(
            {"pool_mode": "transaction"}
        )
        return through.render_as_string(hide_password=False)

    def start(self) -> PgBouncer:
        users = self.folder / "users.txt"
        users.write_text(f'"{self.server.username or "postgres"}" ""\n')
        config = self.folder / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.server.host or '127.0.0.1'} port={self.server.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.folder}\n"
            "auth_type = trust\n"
            f"admin_users = {self.server.username or 'postgres'}\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 1000\n"
            f"default_pool_size = {self.pool_size}\n"
            "server_idle_timeout = 1\n"
            "server_lifetime = 3600\n"
            "stats_period = 1\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.folder / 'pgbouncer.log'}\n"
            f"pidfile = {self.folder / 'pgbouncer.pid'}\n"
        )
        # PgBouncer refuses to run as root: then it runs as the OS user postgres.
        as_user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if as_user is not None:
            for path in (self.folder, users, config):
                os.chown(path, as_user.pw_uid, as_user.pw_gid)
        self.process = subprocess.Popen(
            [str(PGBOUNCER), str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=as_user.pw_uid if as_user else None,
            group=as_user.pw_gid if as_user else None,
        )
        deadline = time.monotonic() + 15
        probe = self.url(self.server)
        while True:
            try:
                with psycopg.connect(
                    make_url(probe)
                    .difference_update_query(["pool_mode"])
                    .set(drivername="postgresql")
                    .render_as_string(hide_password=False),
                    connect_timeout=2,
                    autocommit=True,
                    prepare_threshold=None,
                ) as conn:
                    conn.execute("SELECT 1")
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"pgbouncer did not start: {self.log()}") from None
                time.sleep(0.1)

    def counts(self, database: str) -> tuple[int, int]:
        """PgBouncer's (transactions, queries) sent to ``database`` so far (its admin
        console's ``SHOW STATS``, updated every second): a query is one client message."""
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} dbname=pgbouncer "
            f"user={self.server.username or 'postgres'}",
            autocommit=True,
            prepare_threshold=None,
        ) as conn:
            cursor = conn.cursor()
            cursor.execute("SHOW STATS")
            names = [column.name for column in cursor.description or ()]
            for row in cursor.fetchall():
                stats = dict(zip(names, row, strict=True))
                if stats["database"] == database:
                    return int(stats["total_xact_count"]), int(stats["total_query_count"])
        return 0, 0

    def add_user(self, name: str) -> None:
        """Let ``name`` log in through PgBouncer too (its auth file, reloaded)."""
        users = self.folder / "users.txt"
        users.write_text(users.read_text() + f'"{name}" ""\n')
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)
        time.sleep(0.5)

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()
