"""The users of a tenant: who has a memory, of which agents, how many facts, last changed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..schema import LIVE, memory_facts, memory_pending_updates, memory_scopes
from ..scope import Scope


@dataclass(frozen=True)
class UserSummary:
    """One user of a tenant: the agents with a memory of theirs (None: the unnamed agents'),
    their live facts over all those memories (closed versions not counted), when one last
    changed, and each agent's live facts (``agent_facts``, in the order of ``agents``)."""

    user_id: str
    agents: tuple[str | None, ...]
    facts: int
    updated_at: datetime
    agent_facts: tuple[int, ...] = ()


def list_users(
    engine: Engine,
    *,
    tenant_id: str,
    contains: str | None = None,
    user_id: str | None = None,
    limit: int = 100,
) -> list[UserSummary]:
    """``tenant_id``'s users (only those whose id contains ``contains``, casefold; only
    ``user_id``, if given), most recently changed first, at most ``limit``.

    Raises:
        InvalidScopeError: ``tenant_id`` is malformed.
        ValueError: ``limit`` below 1.
        StorageError: the database failed.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    checked = Scope.of(tenant_id=tenant_id, user_id=user_id)
    tenant = checked.tenant_id
    s, f = memory_scopes, memory_facts
    conditions = [s.c.tenant_id == tenant]
    if user_id is not None:
        conditions.append(s.c.user_id == checked.user_id)
    if contains is not None and contains.strip():
        pattern = "%" + _escape_like(contains.strip().lower()) + "%"
        conditions.append(sa.func.lower(s.c.user_id).like(pattern, escape="\\"))
    facts = (
        sa.select(f.c.user_id, f.c.agent_name, sa.func.count().label("facts"))
        .where(f.c.tenant_id == tenant, LIVE)
        .group_by(f.c.user_id, f.c.agent_name)
        .subquery()
    )
    latest = sa.func.max(s.c.updated_at)
    page = (
        sa.select(s.c.user_id, latest.label("updated_at"))
        .where(*conditions)
        .group_by(s.c.user_id)
        .order_by(latest.desc(), s.c.user_id)
        .limit(limit)
        .subquery()
    )
    statement = (
        sa.select(
            page.c.user_id,
            page.c.updated_at,
            sa.func.coalesce(facts.c.facts, 0).label("facts"),
            s.c.agent_name,
        )
        .select_from(
            page.join(s, sa.and_(s.c.tenant_id == tenant, s.c.user_id == page.c.user_id)).outerjoin(
                facts,
                sa.and_(facts.c.user_id == page.c.user_id, facts.c.agent_name == s.c.agent_name),
            )
        )
        .order_by(page.c.updated_at.desc(), page.c.user_id, s.c.agent_name)
    )
    with database_errors(engine, f"list the users of tenant {tenant}"), engine.connect() as conn:
        rows = conn.execute(statement).all()
    users: dict[str, list[sa.Row[Any, Any, Any, Any]]] = {}
    for row in rows:  # one row per memory, users in the page's order
        users.setdefault(row.user_id, []).append(row)
    return [
        UserSummary(
            user_id,
            tuple(row.agent_name or None for row in group),
            sum(row.facts for row in group),
            group[0].updated_at,
            tuple(row.facts for row in group),
        )
        for user_id, group in users.items()
    ]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


__all__ = ["UserSummary", "list_users"]


def other_tenants(engine: Engine, scope: Scope) -> list[str]:
    """The tenants other than ``scope``'s that hold a memory of ``scope``'s user (any agent),
    at most 11."""
    statement = (
        sa.select(memory_scopes.c.tenant_id)
        .where(
            memory_scopes.c.user_id == scope.user_id,
            memory_scopes.c.tenant_id != scope.tenant_id,
        )
        .distinct()
        .order_by(memory_scopes.c.tenant_id)
        .limit(11)
    )
    with engine.connect() as conn:
        return list(conn.execute(statement).scalars())


def memory_keys(engine: Engine, *, tenant_id: str | None = None) -> list[tuple[str, str, str]]:
    """The (tenant, user, agent key) of every stored memory of ``tenant_id`` (None: of the
    whole database), ordered so.

    Raises:
        StorageError: the database failed.
    """
    s = memory_scopes.c
    statement = sa.select(s.tenant_id, s.user_id, s.agent_name).order_by(
        s.tenant_id, s.user_id, s.agent_name
    )
    if tenant_id is not None:
        statement = statement.where(s.tenant_id == tenant_id)
    with database_errors(engine, "export"), engine.connect() as conn:
        return [tuple(row) for row in conn.execute(statement).all()]


def users_in_database(engine: Engine) -> set[str] | None:
    """Every user id the database holds a memory or a queued update of (any tenant), or None
    when it has no memory_sql tables (not a memory_sql database).

    Raises:
        StorageError: the database cannot be read.
    """
    with database_errors(engine, "reading its users"), engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        if memory_scopes.name not in tables:
            return None
        users = set(conn.execute(sa.select(memory_scopes.c.user_id)).scalars())
        if memory_pending_updates.name in tables:
            users |= set(conn.execute(sa.select(memory_pending_updates.c.user_id)).scalars())
    return users
