"""PostgreSQL roles for the tests that run the service as a role row-level security holds:
a LOGIN role that owns nothing and is no superuser, granted what ``memory-sql db grant
--apply`` gives the HTTP service."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import URL


def memory_sql_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``memory-sql ARGS`` as a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "memory_sql", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("MEMORY_SQL_")},
            "COLUMNS": "200",
            "NO_COLOR": "1",
        },
    )


@contextmanager
def login_role(server: URL, database: URL, prefix: str) -> Iterator[str]:
    """A new LOGIN role (no superuser, no BYPASSRLS) on the shared server; at the end what it
    owns or was granted in ``database`` is dropped, and then the role, whatever happened."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    on_server = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with on_server.connect() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOBYPASSRLS')
        try:
            yield name
        finally:
            in_database = sa.create_engine(database, isolation_level="AUTOCOMMIT")
            try:
                with in_database.connect() as conn:
                    conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE usename = :name"
                        ),
                        {"name": name},
                    )
                    conn.exec_driver_sql(f'REASSIGN OWNED BY "{name}" TO CURRENT_USER')
                    conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
            finally:
                in_database.dispose()
                with on_server.connect() as conn:
                    conn.exec_driver_sql(f'DROP ROLE "{name}"')
    finally:
        on_server.dispose()


def grant_service_role(role: str, owner_url: str) -> None:
    done = memory_sql_cli("db", "grant", "--role", role, "--apply", "--url", owner_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"granted to {role}" in done.stdout
