"""Lighter fact writes (issue #32): three indexes no statement needs are dropped (every add
paid an entry in each), and on PostgreSQL the facts' pages keep room for HOT updates.

- ``ix_memory_facts_tenant_created_at``: no statement reads facts by their creation time
  across a memory or a tenant (loads go by the scope, searches order by confidence, the
  purge reads ``ix_memory_facts_tenant_valid_to``).
- ``ix_memory_facts_scope_confidence`` (live facts of one memory by confidence): the primary
  key and the live partial unique index ``uq_memory_facts_live_content_key`` find the same
  rows by the same scope prefix, for a load and for a search of one memory, and a memory's
  live facts are few (``eviction.max_facts``, at most 10 000) to order; injection and
  eviction order them in Python.
- ``ix_memory_fact_events_tenant_occurred_at``: the activity report filters on the UTC day
  of ``occurred_at``, an expression the index does not hold, so it served only the tenant
  prefix, which the events' primary key (``tenant_id`` first) serves as well.

Without the confidence index, an update that changes a fact's confidence, confirmation or
source moves no indexed column, so PostgreSQL can write it as a heap-only tuple (HOT: no new
entry in any index, the GIN one included) when the row's page has room: ``memory_facts`` gets
``fillfactor = 90`` (new pages are filled to 90 %; rows are wide, so a full page rarely has
room for another version). Of 1 000 confidence updates (``profile_pg_save.py``, section 4;
docs/write-path.md), none was HOT at revision 0019, 665-755 with the index gone, 945-979 with
the fill factor too. ``memory_scopes``, whose row every save updates, stays at 100: its rows
are narrow and nearly all its updates are HOT already.

docs/write-path.md has the plans before and after and the add's cost. The downgrade builds
the indexes again and resets the fill factor.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_LIVE = sa.text("valid_to IS NULL")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE memory_facts SET (fillfactor = 90)")
    op.drop_index("ix_memory_facts_tenant_created_at", table_name="memory_facts")
    op.drop_index("ix_memory_facts_scope_confidence", table_name="memory_facts")
    op.drop_index("ix_memory_fact_events_tenant_occurred_at", table_name="memory_fact_events")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE memory_facts RESET (fillfactor)")
    op.create_index(
        "ix_memory_fact_events_tenant_occurred_at",
        "memory_fact_events",
        ["tenant_id", "occurred_at"],
    )
    op.create_index(
        "ix_memory_facts_scope_confidence",
        "memory_facts",
        ["tenant_id", "user_id", "agent_name", sa.text("confidence DESC")],
        sqlite_where=_LIVE,
        postgresql_where=_LIVE,
    )
    op.create_index(
        "ix_memory_facts_tenant_created_at", "memory_facts", ["tenant_id", "created_at"]
    )
