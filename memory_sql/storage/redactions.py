"""The redaction counters' SQL: add to ``memory_redactions`` (per tenant, UTC day, kind, stage).

Counts only, never the text: the caller (intake, a save, ``db scrub``) passes kind → number.
One upsert per (tenant, kind): the row's count grows, on SQLite and PostgreSQL alike
(``INSERT … ON CONFLICT … DO UPDATE``, which both dialects of SQLAlchemy write).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..models import utcnow
from ..schema import memory_redactions
from .dialects import dialect_of

STAGES = ("intake", "write", "scrub")


def record_redactions(
    conn: Connection,
    tenant_id: str,
    stage: str,
    counts: Mapping[str, int],
    day: date | None = None,
) -> None:
    """Add ``counts`` (kind → secrets replaced) to the tenant's ``stage`` row of ``day``
    (default: today, UTC), in ``conn``'s transaction."""
    if stage not in STAGES:
        raise ValueError(f"unknown redaction stage {stage!r}")
    rows = [
        {
            "tenant_id": tenant_id,
            "day": day or utcnow().date(),
            "kind": kind,
            "stage": stage,
            "redactions": number,
        }
        for kind, number in sorted(counts.items())
        if number > 0
    ]
    if not rows:
        return
    statement = dialect_of(conn).insert(memory_redactions)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=["tenant_id", "day", "kind", "stage"],
            set_={"redactions": memory_redactions.c.redactions + statement.excluded.redactions},
        ),
        rows,
    )


def redaction_totals(conn: Connection, tenant_id: str | None = None) -> dict[tuple[str, str], int]:
    """Redactions so far, by (tenant, kind), every day and stage (of ``tenant_id`` only, if
    given)."""
    table = memory_redactions
    query = sa.select(table.c.tenant_id, table.c.kind, sa.func.sum(table.c.redactions)).group_by(
        table.c.tenant_id, table.c.kind
    )
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    return {(tenant, kind): int(total) for tenant, kind, total in conn.execute(query)}
