"""The durable watermark: per thread, the last message a successful memory update learned from
(memory_sql.watermark); only the messages after it go to the memory LLM.

A table of its own that no reporting view reads: the downgrade drops it, no table rebuild.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_watermarks",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(256), nullable=False),
        sa.Column(
            "message_key",
            sa.String(64),
            nullable=False,
            comment="the last message learned from: id:<message id> or sha256:<role and text>",
        ),
        sa.Column(
            "position", sa.Integer(), nullable=False, comment="its index in the conversation"
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "user_id", "agent_name", "thread_id", name=op.f("pk_memory_watermarks")
        ),
        comment="Per thread, the last message a successful memory update learned from; only "
        "later messages go to the memory LLM.",
    )


def downgrade() -> None:
    op.drop_table("memory_watermarks")
