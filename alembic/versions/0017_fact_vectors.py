"""Vectors of facts for recall by meaning (semantic recall, issue #31).

``memory_fact_vectors`` holds, per fact and embedding model, the fact's vector as the
configured ``/v1/embeddings`` endpoint gave it: ``vector`` is the little-endian float32 array
(PostgreSQL ``bytea``, SQLite ``BLOB``), ``dimensions`` its length, ``content_digest`` the
SHA-256 of the text embedded (a fact whose text changed no longer matches it and is embedded
again). The memory's keys come first, as in every table; the foreign key to ``memory_facts``
deletes a fact's vectors with it (a purge, a forgotten user). Row-level security on PostgreSQL
as revision 0010 gives every memory table.

Revision ID: 0017
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TABLE = "memory_fact_vectors"
SETTING = "current_setting('memory_sql.tenant_id', true)"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("fact_id", sa.String(64), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column(
            "content_digest",
            sa.String(64),
            nullable=False,
            comment="SHA-256 (hex) of the text embedded",
        ),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column(
            "vector",
            sa.LargeBinary(),
            nullable=False,
            comment="little-endian float32, unit length",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "user_id",
            "agent_name",
            "fact_id",
            "model",
            name=op.f("pk_memory_fact_vectors"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "user_id", "agent_name", "fact_id"],
            [
                "memory_facts.tenant_id",
                "memory_facts.user_id",
                "memory_facts.agent_name",
                "memory_facts.fact_id",
            ],
            name=op.f("fk_memory_fact_vectors_memory_facts"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "dimensions > 0", name=op.f("ck_memory_fact_vectors_dimensions_positive")
        ),
        comment="Per fact and embedding model, the fact's vector (semantic recall).",
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {TABLE} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {TABLE} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY memory_tenant ON {TABLE} "
            f"USING (tenant_id = {SETTING}) WITH CHECK (tenant_id = {SETTING})"
        )
        op.execute(
            f"CREATE POLICY memory_all_tenants ON {TABLE} "
            f"USING ({SETTING} = '*') WITH CHECK ({SETTING} = '*')"
        )


def downgrade() -> None:
    op.drop_table(TABLE)
