"""LLM usage accounting: one row per memory-LLM call (tokens, latency, model, outcome), and the
reporting view ``memory_report_llm_usage`` over it.

The view groups calls per tenant, UTC day and model: calls, prompt and completion tokens,
failures (calls whose update did not end ``ok``) and the median latency. The median is computed
in SQL the same way on both databases: the calls of a group are ranked by latency
(``row_number()``), and the median is the average of the middle one or two
(ranks ``(n + 1) / 2`` and ``(n + 2) / 2`` in integer division), so an even group gives the
mean of its two middle calls on SQLite and PostgreSQL alike (PostgreSQL's
``percentile_cont(0.5)`` would agree, but SQLite has none).

The table has no foreign key to ``memory_scopes`` and no view reads it other than this one, so
the downgrade drops the view, then the table (no table rebuild on SQLite).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OUTCOMES = ("ok", "llm_error", "invalid_reply", "save_failed", "conflicted")
VIEW = "memory_report_llm_usage"


def _view(dialect: str) -> str:
    if dialect == "postgresql":
        day = "CAST(called_at AT TIME ZONE 'UTC' AS DATE)"
    else:  # UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'
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


def upgrade() -> None:
    op.create_table(
        "memory_llm_calls",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(32), nullable=False, comment="a random id (uuid4 hex)"),
        sa.Column("thread_id", sa.String(256), nullable=False),
        sa.Column(
            "model",
            sa.String(256),
            nullable=False,
            comment="as the endpoint answered, else asked",
        ),
        sa.Column("called_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column(
            "tokens_counted",
            sa.Boolean(),
            nullable=False,
            comment="true: counted by memory_sql (the endpoint reported no usage)",
        ),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "outcome IN (" + ", ".join(f"'{name}'" for name in OUTCOMES) + ")",
            name=op.f("ck_memory_llm_calls_outcome"),
        ),
        sa.CheckConstraint(
            "prompt_tokens >= 0 AND completion_tokens >= 0 AND latency_ms >= 0",
            name=op.f("ck_memory_llm_calls_non_negative"),
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "user_id", "agent_name", "call_id", name=op.f("pk_memory_llm_calls")
        ),
        comment="One row per memory-LLM call of an update (failed ones too), for cost "
        "reporting; no foreign key: usage outlives a deleted memory.",
    )
    op.create_index(
        "ix_memory_llm_calls_tenant_called_at", "memory_llm_calls", ["tenant_id", "called_at"]
    )
    op.execute(f"CREATE VIEW {VIEW} AS {_view(op.get_bind().dialect.name).strip()}")


def downgrade() -> None:
    op.execute(f"DROP VIEW IF EXISTS {VIEW}")
    op.drop_index("ix_memory_llm_calls_tenant_called_at", "memory_llm_calls")
    op.drop_table("memory_llm_calls")
