"""Refused reply parts per memory-LLM call, the ``length`` outcome, and their reporting view.

- ``memory_llm_rejections``: per call (``call_id`` of ``memory_llm_calls``) and reason, how many
  parts of the reply were refused (the reasons of :mod:`memory_sql.update.rejections`). No
  foreign key, like the usage rows it belongs to.
- ``memory_llm_calls.outcome`` may be ``length``: the reply was cut at ``max_tokens``.
- ``memory_report_llm_rejections``: per tenant, UTC day, model and reason, the calls with such
  refusals and the parts refused.

On PostgreSQL the new table gets the row-level security of revision 0010, and the view reads as
the querying role (``security_invoker``, from PostgreSQL 15). On SQLite the outcome's CHECK
changes by copying ``memory_llm_calls`` (batch mode); ``memory_report_llm_usage``, which reads
it, is dropped around the copy and made again from the SQL it had (whichever revision wrote
it). The downgrade records
``length`` calls as ``invalid_reply``, the closest older outcome.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

OLD_OUTCOMES = ("ok", "llm_error", "invalid_reply", "save_failed", "conflicted")
OUTCOMES = (*OLD_OUTCOMES, "length")
TABLE = "memory_llm_rejections"
VIEW = "memory_report_llm_rejections"
USAGE_VIEW = "memory_report_llm_usage"
SETTING = "current_setting('memory_sql.tenant_id', true)"
SECURITY_INVOKER_SINCE = 150000  # server_version_num of PostgreSQL 15


def _view(dialect: str) -> str:
    if dialect == "postgresql":
        day = "CAST(c.called_at AT TIME ZONE 'UTC' AS DATE)"
    else:  # UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'
        day = "date(c.called_at)"
    return f"""
        SELECT tenant_id, day, model, reason, count(*) AS calls, sum(items) AS items
        FROM (SELECT c.tenant_id, {day} AS day, c.model, r.reason, r.items
              FROM {TABLE} AS r
              JOIN memory_llm_calls AS c
                ON c.tenant_id = r.tenant_id AND c.user_id = r.user_id
               AND c.agent_name = r.agent_name AND c.call_id = r.call_id) AS refused
        GROUP BY tenant_id, day, model, reason
    """


def _check(outcomes: tuple[str, ...]) -> str:
    return "outcome IN (" + ", ".join(f"'{name}'" for name in outcomes) + ")"


def _calls_table(outcomes: tuple[str, ...]) -> sa.Table:
    """``memory_llm_calls`` as revision 0007 made it, with the CHECK of ``outcomes``."""
    return sa.Table(
        "memory_llm_calls",
        sa.MetaData(),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(32), nullable=False, comment="a random id (uuid4 hex)"),
        sa.Column("thread_id", sa.String(256), nullable=False),
        sa.Column(
            "model", sa.String(256), nullable=False, comment="as the endpoint answered, else asked"
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
        sa.CheckConstraint(_check(outcomes), name="ck_memory_llm_calls_outcome"),
        sa.CheckConstraint(
            "prompt_tokens >= 0 AND completion_tokens >= 0 AND latency_ms >= 0",
            name="ck_memory_llm_calls_non_negative",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "user_id", "agent_name", "call_id", name="pk_memory_llm_calls"
        ),
        sa.Index("ix_memory_llm_calls_tenant_called_at", "tenant_id", "called_at"),
        comment="One row per memory-LLM call of an update (failed ones too), for cost "
        "reporting; no foreign key: usage outlives a deleted memory.",
    )


def _set_outcomes(outcomes: tuple[str, ...]) -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("ALTER TABLE memory_llm_calls DROP CONSTRAINT ck_memory_llm_calls_outcome")
        op.execute(
            "ALTER TABLE memory_llm_calls ADD CONSTRAINT ck_memory_llm_calls_outcome "
            f"CHECK ({_check(outcomes)})"
        )
        return
    # SQLite: the view that reads the table goes around the copy, kept as it is written.
    usage_view = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", (USAGE_VIEW,)
        )
        .scalar()
    )
    if usage_view is not None:
        op.execute(f"DROP VIEW {USAGE_VIEW}")
    with op.batch_alter_table(
        "memory_llm_calls", recreate="always", copy_from=_calls_table(outcomes)
    ):
        pass
    if usage_view is not None:
        op.execute(usage_view)


def _invoker_views() -> bool:
    bind = op.get_bind()
    return int(bind.exec_driver_sql("SHOW server_version_num").scalar()) >= SECURITY_INVOKER_SINCE


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _set_outcomes(OUTCOMES)
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(32), nullable=False, comment="the memory_llm_calls row"),
        sa.Column("reason", sa.String(32), nullable=False, comment="memory_sql.update.rejections"),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.CheckConstraint("items > 0", name=op.f("ck_memory_llm_rejections_positive")),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "user_id",
            "agent_name",
            "call_id",
            "reason",
            name=op.f("pk_memory_llm_rejections"),
        ),
        comment="Per memory-LLM call, the parts of its reply refused (facts, removals, "
        "sections), counted by reason; no foreign key, like the usage rows.",
    )
    op.execute(f"CREATE VIEW {VIEW} AS {_view(dialect).strip()}")
    if dialect != "postgresql":
        return
    if _invoker_views():
        op.execute(f"ALTER VIEW {VIEW} SET (security_invoker = true)")
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
    op.execute(f"DROP VIEW IF EXISTS {VIEW}")
    op.drop_table(TABLE)  # its policies go with it
    op.execute("UPDATE memory_llm_calls SET outcome = 'invalid_reply' WHERE outcome = 'length'")
    _set_outcomes(OLD_OUTCOMES)
