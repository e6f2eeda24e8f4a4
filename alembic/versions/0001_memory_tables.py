"""Memory scopes, sections and facts.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCOPE_COLUMNS = ("tenant_id", "user_id", "agent_name")
SCOPE_REFERENCE = [f"memory_scopes.{name}" for name in SCOPE_COLUMNS]


def _scope_columns() -> list[sa.Column]:
    return [
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "memory_scopes",
        *_scope_columns(),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("version >= 1", name=op.f("ck_memory_scopes_version_positive")),
        sa.PrimaryKeyConstraint(*SCOPE_COLUMNS, name=op.f("pk_memory_scopes")),
        comment="One row per memory; version counts its saves (optimistic concurrency).",
    )
    op.create_table(
        "memory_sections",
        *_scope_columns(),
        sa.Column("section", sa.String(32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "section IN ('work_context', 'personal_context', 'top_of_mind', "
            "'recent_months', 'earlier_context', 'long_term_background')",
            name=op.f("ck_memory_sections_section_name"),
        ),
        sa.ForeignKeyConstraint(
            list(SCOPE_COLUMNS),
            SCOPE_REFERENCE,
            name=op.f("fk_memory_sections_memory_scopes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(*SCOPE_COLUMNS, "section", name=op.f("pk_memory_sections")),
        comment="User-context and history summaries; a missing row is an empty section.",
    )
    op.create_table(
        "memory_facts",
        *_scope_columns(),
        sa.Column("fact_id", sa.String(64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column(
            "content_key",
            sa.String(64),
            nullable=False,
            comment="SHA-256 of the casefold key (memory_sql.fact_key) of content",
        ),
        sa.Column("category", sa.String(32), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source_thread_id", sa.String(256), nullable=True),
        sa.Column("source_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "confidence >= 0 AND confidence <= 1", name=op.f("ck_memory_facts_confidence_range")
        ),
        sa.ForeignKeyConstraint(
            list(SCOPE_COLUMNS),
            SCOPE_REFERENCE,
            name=op.f("fk_memory_facts_memory_scopes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(*SCOPE_COLUMNS, "fact_id", name=op.f("pk_memory_facts")),
        sa.UniqueConstraint(*SCOPE_COLUMNS, "content_key", name="uq_memory_facts_content_key"),
        comment="Durable facts about a user; duplicates (casefold) are impossible per scope.",
    )
    op.create_index(
        "ix_memory_facts_scope_confidence",
        "memory_facts",
        [*SCOPE_COLUMNS, sa.literal_column("confidence DESC")],
    )
    op.create_index("ix_memory_facts_tenant_category", "memory_facts", ["tenant_id", "category"])
    op.create_index(
        "ix_memory_facts_tenant_created_at", "memory_facts", ["tenant_id", "created_at"]
    )
    op.create_index(
        "ix_memory_facts_tenant_updated_at", "memory_facts", ["tenant_id", "updated_at"]
    )


def downgrade() -> None:
    op.drop_table("memory_facts")
    op.drop_table("memory_sections")
    op.drop_table("memory_scopes")
