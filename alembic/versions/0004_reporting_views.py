"""Reporting views: facts per category, confidence buckets, activity per day, memory sizes, queue.

Plain SQL views over the tables, the same columns on SQLite and PostgreSQL; only the day of an
event is computed differently (a UTC date on PostgreSQL, ``'YYYY-MM-DD'`` text on SQLite).
Views are invisible to Alembic's autogenerate, so they never show as drift.

A later revision that rebuilds one of the tables these views read with ``batch_alter_table`` on
SQLite (copy, drop, rename) must drop the views first and create them again afterwards: SQLite
re-checks every view when a table is renamed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Buckets are [0.0, 0.1), [0.1, 0.2), … [0.9, 1.0] (the last includes 1.0). A CASE on float
# literals rather than floor(confidence * 10): the same answer on both databases, and no
# rounding surprise at the edges (0.7 lands in 0.7-0.8, never in 0.6-0.7).
_BUCKET = (
    "CASE"
    + "".join(f" WHEN confidence < 0.{i + 1} THEN '0.{i}-0.{i + 1}'" for i in range(9))
    + " ELSE '0.9-1.0' END"
)


def _views(dialect: str) -> dict[str, str]:
    if dialect == "postgresql":
        day = "CAST(occurred_at AT TIME ZONE 'UTC' AS DATE)"
    else:  # SQLite stores UTC timestamps as text: 'YYYY-MM-DD HH:MM:SS.ffffff'
        day = "date(occurred_at)"
    return {
        "memory_report_categories": """
            SELECT tenant_id, category,
                   count(*) AS facts,
                   avg(confidence) AS avg_confidence,
                   min(confidence) AS min_confidence,
                   max(confidence) AS max_confidence
            FROM memory_facts
            GROUP BY tenant_id, category
        """,
        "memory_report_confidence": f"""
            SELECT tenant_id, bucket, count(*) AS facts
            FROM (SELECT tenant_id, {_BUCKET} AS bucket FROM memory_facts) AS bucketed
            GROUP BY tenant_id, bucket
        """,
        "memory_report_activity": f"""
            SELECT tenant_id, {day} AS day,
                   sum(CASE WHEN event = 'added' THEN 1 ELSE 0 END) AS added,
                   sum(CASE WHEN event = 'updated' THEN 1 ELSE 0 END) AS updated,
                   sum(CASE WHEN event = 'removed' THEN 1 ELSE 0 END) AS removed
            FROM memory_fact_events
            GROUP BY tenant_id, {day}
        """,
        "memory_report_largest": """
            SELECT s.tenant_id, s.user_id, s.agent_name,
                   (SELECT count(*) FROM memory_facts f
                    WHERE f.tenant_id = s.tenant_id AND f.user_id = s.user_id
                      AND f.agent_name = s.agent_name) AS facts,
                   (SELECT count(*) FROM memory_sections m
                    WHERE m.tenant_id = s.tenant_id AND m.user_id = s.user_id
                      AND m.agent_name = s.agent_name AND m.summary <> '') AS sections,
                   s.version, s.updated_at
            FROM memory_scopes s
        """,
        "memory_report_queue": """
            SELECT tenant_id, status,
                   count(*) AS updates,
                   min(due_at) AS oldest_due,
                   max(attempts) AS max_attempts,
                   sum(CASE WHEN lease_until IS NOT NULL AND lease_until >= CURRENT_TIMESTAMP
                            THEN 1 ELSE 0 END) AS leased
            FROM memory_pending_updates
            GROUP BY tenant_id, status
        """,
    }


def upgrade() -> None:
    for name, query in _views(op.get_bind().dialect.name).items():
        op.execute(f"CREATE VIEW {name} AS {query.strip()}")


def downgrade() -> None:
    for name in reversed(list(_views(op.get_bind().dialect.name))):
        op.execute(f"DROP VIEW IF EXISTS {name}")
