"""PostgreSQL tells listening workers when queued work becomes due: ``NOTIFY memory_sql_queue``.

Two statement-level triggers on ``memory_pending_updates`` (after INSERT, after UPDATE) call
``memory_sql_queue_notify()``, which sends on the channel ``memory_sql_queue`` the earliest due
time, as seconds since the epoch, among the rows the statement left claimable (``pending`` and
not leased): a conversation queued, a batch of them, a failed run's back-off, a run given back,
a row released for the newer conversation that came during its run, a retry or flush from
another process, an UPDATE typed by hand. A claim, a lease renewal or a row given up send
nothing. A statement sends at most one notification, and PostgreSQL delivers it at commit (a
rolled-back enqueue sends none). The payload is a time only: whoever may LISTEN on the database
learns no tenant, user or text from it.

Why triggers rather than ``NOTIFY`` in the queue's own code: every path that makes a row due
is covered, including those of other processes and of plain SQL, and none can forget it.
The trigger function runs as the writer (``SECURITY INVOKER``); ``pg_notify`` and the new
function are executable by PUBLIC, so the service's role that ``memory-sql db grant``
prepares needs nothing more, and row-level security does not apply to the statement's
transition table. Workers listen in :mod:`memory_sql.queue.wakeups`.

SQLite has no NOTIFY: there this revision changes nothing (workers poll a change counter).

Revision ID: 0015
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0011"
branch_labels = None
depends_on = None

CHANNEL = "memory_sql_queue"
FUNCTION = "memory_sql_queue_notify"
TRIGGERS = {
    "memory_pending_updates_notify_insert": "INSERT",
    "memory_pending_updates_notify_update": "UPDATE",
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            due timestamptz;
        BEGIN
            SELECT min(due_at) INTO due FROM changed_rows
            WHERE status = 'pending' AND lease_owner IS NULL;
            IF due IS NOT NULL THEN
                PERFORM pg_notify('{CHANNEL}', extract(epoch FROM due)::text);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    # Transition tables take one event per trigger (and no column list): two triggers.
    for name, event in TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON memory_pending_updates "
            f"REFERENCING NEW TABLE AS changed_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {FUNCTION}()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON memory_pending_updates")
    op.execute(f"DROP FUNCTION {FUNCTION}()")
