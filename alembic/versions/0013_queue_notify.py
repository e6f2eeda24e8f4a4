"""PostgreSQL tells listening workers when queued work becomes due: ``NOTIFY memory_sql_queue``.

Two statement-level triggers on ``memory_pending_updates`` (after INSERT, after UPDATE) call
``memory_sql_queue_notify()``, which sends on the channel ``memory_sql_queue`` the earliest due
time, as seconds since the epoch, among the rows the statement left claimable (``pending`` and
not leased) and that was not so already, or was so but later: a new conversation's row, a batch
of them, a failed run's back-off, a run given back, a row released for the newer conversation
that came during its run, a retry or flush from another process, an UPDATE typed by hand. A
claim, a lease renewal, a row given up, and a turn merged into a row already waiting (its due
time only moves later: whoever heard of the earlier time wakes then and finds the new one) send
nothing, so a busy thread's turns do not pay for a notification each. A statement sends at most
one notification, and PostgreSQL delivers it at commit (a rolled-back enqueue sends none). Its
cost: PostgreSQL serialises the commits of transactions that notified (a database-wide lock held
through the commit), so concurrent enqueues of new rows commit one at a time
(``benchmarks/bench_queue.py`` measures it). The payload is a time only: whoever may LISTEN on
the database learns no tenant, user or text from it.

Why triggers rather than ``NOTIFY`` in the queue's own code: every path that makes a row due
is covered, including those of other processes and of plain SQL, and none can forget it.
The trigger function runs as the writer (``SECURITY INVOKER``); ``pg_notify`` and the new
function are executable by PUBLIC, so the service's role that ``memory-sql db grant``
prepares needs nothing more, and row-level security does not apply to the statement's
transition table. Workers listen in :mod:`memory_sql.queue.wakeups`.

SQLite has no NOTIFY: there this revision changes nothing (workers poll a change counter).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

CHANNEL = "memory_sql_queue"
FUNCTION = "memory_sql_queue_notify"
TRIGGERS = ("memory_pending_updates_notify_insert", "memory_pending_updates_notify_update")
KEY = ("tenant_id", "user_id", "agent_name", "thread_id", "kind")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            due timestamptz;
        BEGIN
            IF TG_OP = 'INSERT' THEN
                SELECT min(due_at) INTO due FROM new_rows
                WHERE status = 'pending' AND lease_owner IS NULL;
            ELSE
                SELECT min(n.due_at) INTO due
                FROM new_rows n JOIN old_rows o USING ({", ".join(KEY)})
                WHERE n.status = 'pending' AND n.lease_owner IS NULL
                  AND (o.status <> 'pending' OR o.lease_owner IS NOT NULL
                       OR n.due_at < o.due_at);
            END IF;
            IF due IS NOT NULL THEN
                PERFORM pg_notify('{CHANNEL}', extract(epoch FROM due)::text);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    # Transition tables take one event per trigger (and no column list): two triggers.
    op.execute(
        "CREATE TRIGGER memory_pending_updates_notify_insert AFTER INSERT "
        "ON memory_pending_updates REFERENCING NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
    )
    op.execute(
        "CREATE TRIGGER memory_pending_updates_notify_update AFTER UPDATE "
        "ON memory_pending_updates REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON memory_pending_updates")
    op.execute(f"DROP FUNCTION {FUNCTION}()")
