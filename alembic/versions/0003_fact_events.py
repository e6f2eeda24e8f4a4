"""Fact events: an append-only log of facts added, updated and removed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_fact_events",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column(
            "version", sa.Integer(), nullable=False, comment="the memory version the save made"
        ),
        sa.Column("fact_id", sa.String(64), nullable=False),
        sa.Column("event", sa.String(8), nullable=False),
        sa.Column("category", sa.String(32), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "event IN ('added', 'updated', 'removed')", name=op.f("ck_memory_fact_events_event")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "user_id",
            "agent_name",
            "version",
            "fact_id",
            name=op.f("pk_memory_fact_events"),
        ),
        comment="Append-only log of fact changes, written by each save, for reporting over time.",
    )
    op.create_index(
        "ix_memory_fact_events_tenant_occurred_at",
        "memory_fact_events",
        ["tenant_id", "occurred_at"],
    )


def downgrade() -> None:
    op.drop_table("memory_fact_events")
