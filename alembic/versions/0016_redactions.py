"""Secrets redacted, counted per tenant, day, kind and stage, and their reporting view.

- ``memory_redactions``: per tenant, UTC day, kind of secret (``aws-secret``, ``jwt``, …, see
  :mod:`memory_sql.intake.redact`) and stage (``intake``: a conversation queued; ``write``: a
  memory saved; ``scrub``: ``memory-sql db scrub``), how many secrets were replaced by
  placeholders. Never the secret itself.
- ``memory_report_redactions``: per tenant, day and kind, the redactions of every stage and of
  each.

On PostgreSQL the table gets the row-level security of revision 0010, and the view reads as
the querying role (``security_invoker``, from PostgreSQL 15).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TABLE = "memory_redactions"
VIEW = "memory_report_redactions"
SETTING = "current_setting('memory_sql.tenant_id', true)"
SECURITY_INVOKER_SINCE = 150000  # server_version_num of PostgreSQL 15

_VIEW_SQL = f"""
    SELECT tenant_id, day, kind, sum(redactions) AS redactions,
           sum(CASE WHEN stage = 'intake' THEN redactions ELSE 0 END) AS at_intake,
           sum(CASE WHEN stage = 'write' THEN redactions ELSE 0 END) AS at_write,
           sum(CASE WHEN stage = 'scrub' THEN redactions ELSE 0 END) AS by_scrub
    FROM {TABLE}
    GROUP BY tenant_id, day, kind
"""


def upgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        TABLE,
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("day", sa.Date(), nullable=False, comment="the UTC day"),
        sa.Column("kind", sa.String(40), nullable=False, comment="memory_sql.intake.redact.KINDS"),
        sa.Column(
            "stage",
            sa.String(16),
            nullable=False,
            comment="intake (a conversation queued), write (a memory saved), scrub (db scrub)",
        ),
        sa.Column("redactions", sa.Integer(), nullable=False),
        sa.CheckConstraint("redactions > 0", name=op.f("ck_memory_redactions_positive")),
        sa.CheckConstraint(
            "stage IN ('intake', 'write', 'scrub')", name=op.f("ck_memory_redactions_stage")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "day", "kind", "stage", name=op.f("pk_memory_redactions")
        ),
        comment="Per tenant, UTC day, kind of secret and stage, how many secrets were "
        "replaced by placeholders (never the secrets themselves).",
    )
    op.execute(f"CREATE VIEW {VIEW} AS {_VIEW_SQL.strip()}")
    if bind.dialect.name != "postgresql":
        return
    if int(bind.exec_driver_sql("SHOW server_version_num").scalar()) >= SECURITY_INVOKER_SINCE:
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
