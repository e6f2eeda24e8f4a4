"""What a test can see of PostgreSQL's sessions from the server's side."""

from __future__ import annotations

import time

import sqlalchemy as sa


def wait_until_session_ends(engine: sa.Engine, pid: int, what: str, seconds: float = 10) -> None:
    """Return once the server has no session of backend ``pid`` (a client closes its
    connection, the server's backend exits a moment later); fail naming ``what`` if it stays.

    Each look is a transaction of its own: within one, a backend's view of
    ``pg_stat_activity`` is a snapshot taken at its first read and never changes, so a
    session seen once would be seen until the deadline."""
    deadline = time.monotonic() + seconds
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        while conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}
        ).scalar():
            assert time.monotonic() < deadline, f"{what} (backend {pid}) is still connected"
            time.sleep(0.05)
