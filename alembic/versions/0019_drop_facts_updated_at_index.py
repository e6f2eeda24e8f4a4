"""Drop ``ix_memory_facts_tenant_updated_at`` (issue #32): every write of a fact paid for it and
no statement reads by it.

Loads and saves find a memory's facts by the primary key and the live partial indexes, the
reporting views group by category and confidence, the retention purge reads closed facts by
``ix_memory_facts_tenant_valid_to``, and the users' list orders memories by the scope rows'
``updated_at``, not the facts'. An index on the facts' ``updated_at`` only cost each insert a
b-tree entry and made every update of a fact (whose ``updated_at`` always moves) non-HOT on
PostgreSQL (docs/write-path.md). The downgrade builds it again.
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

INDEX = "ix_memory_facts_tenant_updated_at"


def upgrade() -> None:
    op.drop_index(INDEX, table_name="memory_facts")


def downgrade() -> None:
    op.create_index(INDEX, "memory_facts", ["tenant_id", "updated_at"])
