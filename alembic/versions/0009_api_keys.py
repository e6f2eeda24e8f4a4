"""Keys of the HTTP service (memory_sql.server): each bound to one tenant and a role, only a hash
of its secret stored.

A table of its own that nothing else references: the downgrade drops it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_api_keys",
        sa.Column("key_id", sa.String(32), nullable=False, comment="the public part of the key"),
        sa.Column(
            "tenant_id",
            sa.String(64),
            nullable=False,
            comment="the tenant every request acts for",
        ),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column(
            "secret_sha256",
            sa.String(64),
            nullable=False,
            comment="hex SHA-256 of the secret part; the secret itself is never stored",
        ),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "last_used_at", sa.DateTime(timezone=True), nullable=True, comment="to the minute"
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "role IN ('read', 'write', 'admin')", name=op.f("ck_memory_api_keys_role")
        ),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_memory_api_keys")),
        comment="Keys of the HTTP service, each bound to one tenant; read before the tenant is "
        "known, so not under row-level security.",
    )
    op.create_index("ix_memory_api_keys_tenant_id", "memory_api_keys", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_memory_api_keys_tenant_id", table_name="memory_api_keys")
    op.drop_table("memory_api_keys")
