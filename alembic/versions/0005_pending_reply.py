"""Pending updates keep a parsed LLM reply that lost to version conflicts, to apply it again;
an index on lease ends finds the memories being updated (a claim skips them).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "memory_pending_updates",
        sa.Column(
            "reply",
            sa.Text(),
            nullable=True,
            comment="the parsed LLM reply of a run that gave up on version conflicts, "
            "applied again by the next run instead of asking the LLM",
        ),
    )
    op.create_index(
        "ix_memory_pending_updates_lease_until", "memory_pending_updates", ["lease_until"]
    )


def downgrade() -> None:
    op.drop_index("ix_memory_pending_updates_lease_until", "memory_pending_updates")
    if op.get_bind().dialect.name == "sqlite":
        # SQLite 3.35+ drops a column in place: no table rebuild, so the reporting views of
        # revision 0004 (which SQLite re-checks on a rebuild's rename) stay as they are.
        op.execute("ALTER TABLE memory_pending_updates DROP COLUMN reply")
    else:
        op.drop_column("memory_pending_updates", "reply")
