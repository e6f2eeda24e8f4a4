"""Row-level security on PostgreSQL: every memory table shows a connection only the rows of the
tenant in its ``memory_sql.tenant_id`` setting, or every row when the setting is ``*``
(memory_sql.tenancy). Forced, so the tables' owner is held to it too (superusers and roles with
BYPASSRLS are not).

A view reads its tables with its owner's rights, and an owner who is a superuser (as whoever
migrated the database often is) bypasses row-level security: the reporting views would show
every tenant. On PostgreSQL 15 and later they are made ``security_invoker``, so they read as
the role querying them and are filtered like the tables. (On older servers, migrate as a role
that is not a superuser, or the views are not filtered.)

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
VIEWS = (
    "memory_report_categories",
    "memory_report_confidence",
    "memory_report_activity",
    "memory_report_largest",
    "memory_report_queue",
    "memory_report_llm_usage",
)
SETTING = "current_setting('memory_sql.tenant_id', true)"
SECURITY_INVOKER_SINCE = 150000  # server_version_num of PostgreSQL 15


def _invoker_views() -> bool:
    bind = op.get_bind()
    return int(bind.exec_driver_sql("SHOW server_version_num").scalar()) >= SECURITY_INVOKER_SINCE


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    if _invoker_views():
        for view in VIEWS:
            op.execute(f"ALTER VIEW {view} SET (security_invoker = true)")
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
    if _invoker_views():
        for view in VIEWS:
            op.execute(f"ALTER VIEW {view} RESET (security_invoker)")
    for table in TABLES:
        op.execute(f"DROP POLICY memory_all_tenants ON {table}")
        op.execute(f"DROP POLICY memory_tenant ON {table}")
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
