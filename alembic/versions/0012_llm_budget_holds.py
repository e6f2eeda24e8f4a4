"""``memory_llm_budget_holds``: per tenant and UTC day, how many times an update was held back
because the tenant's daily memory-LLM budget was used up (it waits, it is not lost); and
``memory_report_llm_usage`` showing that count as ``held_over_budget`` beside the calls and
tokens the budget counts.

A hold is counted each time the worker gives an update back unrun: once when it meets the
limit, then at each re-check (every ``RECHECK_SECONDS`` of memory_sql.update.budget) until
the budget allows it. The view's rows are per tenant, day and model, and a day's holds are
the tenant's: on a day with calls to two models both rows show them.

On PostgreSQL the table has the row-level security of revision 0010, and the view, made
anew, is ``security_invoker`` again on servers that have it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLE = "memory_llm_budget_holds"
VIEW = "memory_report_llm_usage"
SETTING = "current_setting('memory_sql.tenant_id', true)"
SECURITY_INVOKER_SINCE = 150000


def _usage(dialect: str) -> str:
    """The view as revision 0007 made it."""
    if dialect == "postgresql":
        day = "CAST(called_at AT TIME ZONE 'UTC' AS DATE)"
    else:
        day = "date(called_at)"
    return f"""
        SELECT tenant_id, day, model,
               count(*) AS calls,
               sum(prompt_tokens) AS prompt_tokens,
               sum(completion_tokens) AS completion_tokens,
               sum(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 END) AS failures,
               CAST(avg(CASE WHEN rank_in_day IN ((n + 1) / 2, (n + 2) / 2)
                             THEN latency_ms END) AS FLOAT) AS p50_latency_ms
        FROM (SELECT tenant_id, {day} AS day, model, prompt_tokens, completion_tokens,
                     outcome, latency_ms,
                     row_number() OVER (PARTITION BY tenant_id, {day}, model
                                        ORDER BY latency_ms, call_id) AS rank_in_day,
                     count(*) OVER (PARTITION BY tenant_id, {day}, model) AS n
              FROM memory_llm_calls) AS ranked
        GROUP BY tenant_id, day, model
    """


def _usage_with_holds(dialect: str) -> str:
    return f"""
        SELECT usage.tenant_id, usage.day, usage.model, usage.calls, usage.prompt_tokens,
               usage.completion_tokens, usage.failures, usage.p50_latency_ms,
               coalesce(holds.holds, 0) AS held_over_budget
        FROM ({_usage(dialect).strip()}) AS usage
        LEFT JOIN {TABLE} AS holds
               ON holds.tenant_id = usage.tenant_id AND holds.day = usage.day
    """


def _replace_view(body: str) -> None:
    bind = op.get_bind()
    op.execute(f"DROP VIEW IF EXISTS {VIEW}")
    op.execute(f"CREATE VIEW {VIEW} AS {body.strip()}")
    if bind.dialect.name == "postgresql":
        version = int(bind.exec_driver_sql("SHOW server_version_num").scalar())
        if version >= SECURITY_INVOKER_SINCE:
            op.execute(f"ALTER VIEW {VIEW} SET (security_invoker = true)")


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("day", sa.Date(), nullable=False, comment="the UTC day"),
        sa.Column("holds", sa.Integer(), nullable=False),
        sa.Column("last_held_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_reason", sa.Text(), nullable=False),
        sa.CheckConstraint("holds > 0", name=op.f("ck_memory_llm_budget_holds_positive")),
        sa.PrimaryKeyConstraint("tenant_id", "day", name=op.f("pk_memory_llm_budget_holds")),
        comment="Per tenant and UTC day, the updates held back by the daily memory-LLM budget "
        "(each hold and re-check counted); they wait, they are not lost.",
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
    _replace_view(_usage_with_holds(op.get_bind().dialect.name))


def downgrade() -> None:
    _replace_view(_usage(op.get_bind().dialect.name))
    op.drop_table(TABLE)
