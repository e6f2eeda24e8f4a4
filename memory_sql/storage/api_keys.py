"""The SQL of the HTTP service's API keys (``memory_api_keys``); the keys' rules (the token's
shape, roles, hashing, the outage grace) are :mod:`memory_sql.server.keys`'s.

The keys are not under row-level security: every statement here runs outside it. Rows come
back in the order of :data:`COLUMNS`. What a request's check runs (:func:`lookup`, and now and
then :func:`live` and :func:`touch`) is one statement in autocommit: one round trip, directly
or through PgBouncer (where a transaction would add ``BEGIN`` and ``ROLLBACK``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..driver_errors import database_errors
from ..schema import UTCDateTime, memory_api_keys
from ..tenancy import outside_row_security

COLUMNS = (
    memory_api_keys.c.key_id,
    memory_api_keys.c.tenant_id,
    memory_api_keys.c.role,
    memory_api_keys.c.description,
    memory_api_keys.c.created_at,
    memory_api_keys.c.last_used_at,
    memory_api_keys.c.revoked_at,
)
"""A key's stored columns, its secret's hash left out."""

NEVER = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""What :func:`lookup` reads for a time that is not set (so that every row is parsed alike)."""
DUMMY_HASH = hashlib.sha256(b"no such key").hexdigest()
"""The hash :func:`lookup` reads for a key id that does not exist."""


def insert(
    engine: Engine,
    *,
    key_id: str,
    tenant_id: str,
    role: str,
    secret_sha256: str,
    description: str | None,
    created_at: datetime,
) -> None:
    with database_errors(engine, "create an API key"), engine.begin() as conn:
        conn.execute(
            memory_api_keys.insert().values(
                key_id=key_id,
                tenant_id=tenant_id,
                role=role,
                secret_sha256=secret_sha256,
                description=description,
                created_at=created_at,
            )
        )


def rows(engine: Engine, *, tenant_id: str | None = None) -> list[tuple[Any, ...]]:
    """Every key (of ``tenant_id``), oldest first, revoked ones too."""
    statement = sa.select(*COLUMNS).order_by(memory_api_keys.c.created_at, memory_api_keys.c.key_id)
    if tenant_id is not None:
        statement = statement.where(memory_api_keys.c.tenant_id == tenant_id)
    with database_errors(engine, "list API keys"), engine.connect() as conn:
        return [tuple(row) for row in conn.execute(statement)]


def revoke(engine: Engine, key_id: str, now: datetime) -> tuple[Any, ...] | None:
    """Set ``key_id``'s ``revoked_at`` to ``now`` unless set already; the key's row after, or
    None when there is no such key."""
    with database_errors(engine, "revoke an API key"), engine.begin() as conn:
        conn.execute(
            memory_api_keys.update()
            .where(memory_api_keys.c.key_id == key_id, memory_api_keys.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        row = conn.execute(
            sa.select(*COLUMNS).where(memory_api_keys.c.key_id == key_id)
        ).one_or_none()
    return None if row is None else tuple(row)


def lookup(engine: Engine, key_id: str) -> Any:
    """One row whether or not ``key_id`` exists, of the same shape and work: ``found``, then
    the key's columns and ``secret_sha256``, or placeholders (:data:`DUMMY_HASH`,
    :data:`NEVER`) when it does not exist."""
    with database_errors(engine, "check an API key"), _one_statement(engine) as conn:
        return conn.execute(_LOOKUP, {"key_id": key_id}).one()


def live(engine: Engine, key_ids: Iterable[str]) -> set[tuple[str, str]]:
    """(key id, secret hash) of the keys of ``key_ids`` that exist and are not revoked."""
    with database_errors(engine, "check API keys"), _one_statement(engine) as conn:
        return {
            (row[0], row[1])
            for row in conn.execute(
                sa.select(memory_api_keys.c.key_id, memory_api_keys.c.secret_sha256).where(
                    memory_api_keys.c.key_id.in_(list(key_ids)),
                    memory_api_keys.c.revoked_at.is_(None),
                )
            )
        }


def touch(engine: Engine, key_id: str, now: datetime) -> None:
    """Record that ``key_id`` was used ``now``."""
    with database_errors(engine, "record an API key's use"), _one_statement(engine) as conn:
        conn.execute(
            memory_api_keys.update()
            .where(memory_api_keys.c.key_id == key_id)
            .values(last_used_at=now)
        )


@contextmanager
def _one_statement(engine: Engine) -> Iterator[Connection]:
    """A connection in autocommit, outside row-level security, for one statement (its own
    transaction: no ``BEGIN``, no ``COMMIT``, no ``ROLLBACK`` at its return). It is any pooled
    one, left set to whichever tenant it last served (no round trip to change it)."""
    with outside_row_security(), engine.connect() as conn:
        yield conn.execution_options(isolation_level="AUTOCOMMIT")


def _lookup_statement() -> sa.Select[Any]:
    k = memory_api_keys
    wanted = sa.select(sa.bindparam("key_id", type_=sa.String).label("key_id")).subquery()
    never = sa.literal(NEVER, UTCDateTime())
    return sa.select(
        k.c.key_id.is_not(None).label("found"),
        sa.func.coalesce(k.c.key_id, wanted.c.key_id).label("key_id"),
        sa.func.coalesce(k.c.tenant_id, "").label("tenant_id"),
        sa.func.coalesce(k.c.role, "read").label("role"),
        k.c.description,
        sa.func.coalesce(k.c.created_at, never).label("created_at"),
        sa.func.coalesce(k.c.last_used_at, never).label("last_used_at"),
        sa.func.coalesce(k.c.revoked_at, never).label("revoked_at"),
        sa.func.coalesce(k.c.secret_sha256, DUMMY_HASH).label("secret_sha256"),
    ).select_from(wanted.outerjoin(k, k.c.key_id == wanted.c.key_id))


_LOOKUP = _lookup_statement()
