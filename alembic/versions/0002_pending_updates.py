"""Pending memory updates: the durable, debounced queue.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_pending_updates",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(256), nullable=False),
        sa.Column(
            "kind",
            sa.String(8),
            nullable=False,
            comment="'turn': debounced after a conversation; 'flush': before summarization",
        ),
        sa.Column(
            "messages", sa.Text(), nullable=False, comment="the filtered conversation, as JSON"
        ),
        sa.Column("correction", sa.Boolean(), nullable=False),
        sa.Column("reinforcement", sa.Boolean(), nullable=False),
        sa.Column("first_enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "generation", sa.Integer(), nullable=False, comment="+1 on every enqueue of this key"
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "kind IN ('turn', 'flush')", name=op.f("ck_memory_pending_updates_kind")
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'failed')", name=op.f("ck_memory_pending_updates_status")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "user_id",
            "agent_name",
            "thread_id",
            "kind",
            name=op.f("pk_memory_pending_updates"),
        ),
        comment="Conversations waiting for a memory update: one row per key, durable across "
        "crashes.",
    )
    op.create_index(
        "ix_memory_pending_updates_status_due_at", "memory_pending_updates", ["status", "due_at"]
    )


def downgrade() -> None:
    op.drop_table("memory_pending_updates")
