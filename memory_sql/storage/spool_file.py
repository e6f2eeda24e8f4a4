"""The SQL of the spool's file (:mod:`memory_sql.queue.journal`): a SQLite file of its own per
process, on local disk, read and written through ``sqlite3`` directly (it must work while the
queue's database is away, whatever database that is). Rows are appended, read oldest first and
removed by id; WAL with ``synchronous=FULL`` makes a committed append survive a power loss.
"""

from __future__ import annotations

OPEN = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    """
CREATE TABLE IF NOT EXISTS spooled (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    agent_name TEXT,
    thread_id TEXT NOT NULL,
    immediate INTEGER NOT NULL,
    messages TEXT NOT NULL,
    correction INTEGER NOT NULL,
    reinforcement INTEGER NOT NULL,
    spooled_at TEXT NOT NULL
)
""",
)
"""Run on opening the file: journaling, durability, the table."""

BEGIN_WRITE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"

APPEND = (
    "INSERT INTO spooled (tenant_id, user_id, agent_name, thread_id, immediate, "
    "messages, correction, reinforcement, spooled_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""One row: tenant, user, agent, thread, immediate, messages (JSON), correction,
reinforcement, when it came (ISO 8601)."""

TAKE = (
    "SELECT id, tenant_id, user_id, agent_name, thread_id, immediate, messages, "
    "correction, reinforcement FROM spooled ORDER BY id LIMIT ?"
)
"""The oldest rows, up to a limit."""

KEYS = (
    "SELECT tenant_id, user_id, agent_name, thread_id, immediate, count(*) "
    "FROM spooled GROUP BY 1, 2, 3, 4, 5"
)
"""How many rows each key (tenant, user, agent, thread, immediate) has."""

COUNT = "SELECT count(*) FROM spooled"

REMOVE_AT_ONCE = 500
"""The most ids one :func:`remove` statement takes."""


def remove(ids: int) -> str:
    """The statement deleting ``ids`` rows given by id (at most :data:`REMOVE_AT_ONCE`)."""
    return f"DELETE FROM spooled WHERE id IN ({','.join('?' * ids)})"
