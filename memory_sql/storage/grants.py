"""The privileges of the role the HTTP service (and its workers) connect as on PostgreSQL.

That role owns nothing, is no superuser and has no BYPASSRLS, so row-level security holds it
(migration 0010, :mod:`memory_sql.tenancy`). It may read and write the memory tables' rows,
read the reporting views and the migration stamp, and read the API keys and stamp their last
use; it cannot change the schema, the stamp, or create or revoke keys (``memory-sql keys``,
run as the owner, does).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..schema import memory_api_keys, metadata
from .dialects import dialect_of
from .reports import VIEW_NAMES

_ROLE_NAME_LIMIT = 63


def grant_statements(engine: Engine, role: str) -> list[str]:
    """The GRANT statements for ``role``, quoted for ``engine``'s PostgreSQL.

    Raises:
        ValueError: not a PostgreSQL database, or ``role`` is empty or too long.
    """
    if not dialect_of(engine).row_security:
        raise ValueError(
            "roles and row-level security are PostgreSQL's: a SQLite database has neither "
            "(its isolation is the tenant filter of every query)"
        )
    if not role or len(role) > _ROLE_NAME_LIMIT or "\x00" in role:
        raise ValueError(f"role must be a PostgreSQL role name of 1 to 63 characters: {role!r}")
    quote = engine.dialect.identifier_preparer.quote
    who = quote(role)
    tables = sorted(name for name in metadata.tables if name != memory_api_keys.name)
    return [
        f"GRANT USAGE ON SCHEMA {quote(_schema(engine))} TO {who}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(map(quote, tables))} TO {who}",
        f"GRANT SELECT ON {', '.join(map(quote, VIEW_NAMES))} TO {who}",
        f"GRANT SELECT ON alembic_version TO {who}",
        f"GRANT SELECT, UPDATE (last_used_at) ON {quote(memory_api_keys.name)} TO {who}",
    ]


def apply_grants(engine: Engine, role: str) -> list[str]:
    """Run :func:`grant_statements` in one transaction and return them.

    Raises:
        ValueError: the role does not exist, or bypasses row-level security (a superuser,
            BYPASSRLS), or owns the memory tables; nothing was granted.
    """
    statements = grant_statements(engine, role)
    with engine.begin() as conn:
        found = conn.execute(
            sa.text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = :role"),
            {"role": role},
        ).one_or_none()
        if found is None:
            raise ValueError(
                f"role {role!r} does not exist: CREATE ROLE {role} LOGIN PASSWORD '…' first"
            )
        if found.rolsuper or found.rolbypassrls:
            raise ValueError(
                f"role {role!r} is a superuser or has BYPASSRLS: row-level security would not "
                "hold it; the service needs a role of its own"
            )
        owns = conn.execute(
            sa.text(
                "SELECT pg_has_role(:role, c.relowner, 'USAGE') FROM pg_class c "
                "WHERE c.oid = to_regclass('memory_facts')"
            ),
            {"role": role},
        ).scalar()
        if owns:
            raise ValueError(
                f"role {role!r} owns the memory tables, or is a member of their owner's role (it "
                "could turn row-level security off): use a role that owns nothing"
            )
        for statement in statements:
            conn.exec_driver_sql(statement)
    return statements


def _schema(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.text("SELECT current_schema()")).scalar())


def role_bypassing_row_security(engine: Engine) -> str | None:
    """The role ``engine`` connects as when row-level security does not hold it (a superuser,
    BYPASSRLS), else None (also on a database without row-level security)."""
    if not dialect_of(engine).row_security:
        return None
    with engine.connect() as conn:
        role, bypasses = conn.execute(
            sa.text(
                "SELECT rolname, rolsuper OR rolbypassrls FROM pg_roles "
                "WHERE rolname = current_user"
            )
        ).one()
    return role if bypasses else None
