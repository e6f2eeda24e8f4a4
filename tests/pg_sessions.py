"""What a test can see of PostgreSQL's sessions from the server's side."""

from __future__ import annotations

import time

import sqlalchemy as sa


def wait_until_session_ends(engine: sa.Engine, pid: int, what: str, seconds: float = 5) -> None:
    """Return once the server has no session of backend ``pid`` (a client closes its
    connection, the server's backend exits a moment later); fail naming ``what`` if it stays."""
    deadline = time.monotonic() + seconds
    with engine.connect() as conn:
        while conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}
        ).scalar():
            assert time.monotonic() < deadline, f"{what} (backend {pid}) is still connected"
            time.sleep(0.05)
