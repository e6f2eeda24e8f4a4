"""A private primary and a streaming standby (``pg_basebackup -R``), for the replica and
failover tests and ``benchmarks/bench_failover.py``. Both are :class:`PrivateCluster` s: the
primary's WAL is streamed to the standby, synchronously (``synchronous_standby_names``, a
commit waits until the standby has it) or not.

    with ReplicatedPair(synchronous=True) as pair:
        url = pair.create_database("memory")       # on the primary, replayed on the standby
        pair.failover_url("memory")                # both hosts, target_session_attrs=read-write
        pair.standby_url("memory")                 # the standby alone (reads)
        pair.pause_replay(); pair.resume_replay()  # lag the standby on purpose
        pair.primary.kill(); pair.promote()        # a crash, and the standby takes over
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

import psycopg
from pg_cluster import SERVER_USER, ClusterError, PrivateCluster

STANDBY_NAME = "standby1"
REPLICATION = {
    "wal_level": "replica",
    "max_wal_senders": "5",
    "wal_keep_size": "'64MB'",
    "hot_standby": "on",
    "wal_receiver_status_interval": "1",
    "hot_standby_feedback": "on",
}


class ReplicatedPair:
    """A primary and its streaming standby (see the module's docstring)."""

    def __init__(self, *, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        self.primary = PrivateCluster()
        self.standby: PrivateCluster | None = None
        try:
            # A commit is flushed before it is acknowledged (PostgreSQL's default; the private
            # cluster's "off" would lose the last ~200 ms on a crash, replicated or not), and
            # with ``synchronous`` also on the standby.
            settings = {**REPLICATION, "synchronous_commit": "on"}
            if synchronous:
                settings["synchronous_standby_names"] = f"'{STANDBY_NAME}'"
            _append(self.primary.data / "postgresql.conf", settings)
            self.primary.start()
            self.standby = self._standby()
        except BaseException:
            self.close()
            raise

    def _standby(self) -> PrivateCluster:
        standby = PrivateCluster()
        try:
            standby._run(["rm", "-rf", str(standby.data)], timeout=30)
            standby._run(
                [
                    standby._bin("pg_basebackup"),
                    "-D",
                    str(standby.data),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.primary.port),
                    "-U",
                    SERVER_USER,
                    "-R",
                    "-X",
                    "stream",
                    "--no-sync",
                ],
                timeout=120,
            )
            standby._configure()  # its own port and socket folder (later lines win)
            # Replication again (_configure wrote the single server's settings), and, once
            # promoted, no synchronous standby to wait for: it has none.
            _append(
                standby.data / "postgresql.conf", {**REPLICATION, "synchronous_standby_names": "''"}
            )
            conninfo = (
                f"host=127.0.0.1 port={self.primary.port} user={SERVER_USER} "
                f"application_name={STANDBY_NAME}"
            )
            _append(standby.data / "postgresql.auto.conf", {"primary_conninfo": f"'{conninfo}'"})
            standby.start()
        except BaseException:
            standby.close()
            raise
        return standby

    # --- URLs ---------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create ``name`` on the primary and wait until the standby has it; its primary URL."""
        url = self.primary.create_database(name)
        self.wait_for_replay()
        return url

    def standby_url(self, database: str) -> str:
        assert self.standby is not None
        return self.standby.url_for(database)

    def failover_url(self, database: str, attrs: str = "read-write") -> str:
        """A libpq multi-host URL of both servers, primary first: whichever accepts
        ``target_session_attrs=attrs`` is used."""
        assert self.standby is not None
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql+psycopg://{SERVER_USER}@{hosts}/{database}?target_session_attrs={attrs}"

    # --- replication --------------------------------------------------------------------

    def wait_for_replay(self, timeout: float = 30.0) -> None:
        """Return once the standby has replayed everything the primary has written."""
        assert self.standby is not None
        with self.primary.connect() as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        deadline = time.monotonic() + timeout
        with self.standby.connect() as conn:
            while True:
                row = conn.execute(
                    "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn()) <= 0", [target]
                ).fetchone()
                if row is not None and row[0]:
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(f"the standby did not replay {target} in {timeout:.0f}s")
                time.sleep(0.02)

    def pause_replay(self) -> None:
        assert self.standby is not None
        with self.standby.connect() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        assert self.standby is not None
        with self.standby.connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def promote(self, timeout: float = 30.0) -> float:
        """Promote the standby (``pg_promote``) and return once it takes writes; the seconds
        it took."""
        assert self.standby is not None
        start = time.monotonic()
        with self.standby.connect() as conn:
            conn.execute("SELECT pg_promote(true, %s)", [int(timeout)])
        deadline = start + timeout
        while True:
            try:
                with self.standby.connect() as conn:
                    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is not None and not row[0]:
                    return time.monotonic() - start
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"the standby was not promoted in {timeout:.0f}s")
            time.sleep(0.02)

    # --- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        if self.standby is not None:
            self.standby.close()
        self.primary.close()

    def __enter__(self) -> ReplicatedPair:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _append(conf: Path, settings: dict[str, str]) -> None:
    lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
    with open(conf, "a", encoding="utf-8") as out:
        out.write("\n# memory_sql tests: replication\n" + lines)
