"""Row-level security on PostgreSQL: every memory table shows a connection only the rows of the
tenant in its ``memory_sql.tenant_id`` setting, or every row when the setting is ``*``
(memory_sql.tenancy). Forced, so the tables' owner is held to it too (superusers and roles with
BYPASSRLS are not). The reporting views read these tables and so are filtered the same way.

SQLite has no row-level security: there this revision changes nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLES = (
    "memory_scopes",
    "memory_sections",
    "memory_facts",
    "memory_pending_updates",
    "memory_fact_events",
    "memory_llm_calls",
    "memory_watermarks",
)
SETTING = "current_setting('memory_sql.tenant_id', true)"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY memory_tenant ON {table} "
            f"USING (tenant_id = {SETTING}) WITH CHECK (tenant_id = {SETTING})"
        )
        op.execute(
            f"CREATE POLICY memory_all_tenants ON {table} "
            f"USING ({SETTING} = '*') WITH CHECK ({SETTING} = '*')"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"DROP POLICY memory_all_tenants ON {table}")
        op.execute(f"DROP POLICY memory_tenant ON {table}")
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
