"""Every statement on the update queue's rows (``memory_pending_updates``).

:class:`QueueRows` holds those of the queue itself (:mod:`memory_sql.queue.pending`: enqueue,
claim, lease, complete, retry); the functions below it read and change rows by hand (listed,
counted, retried, dropped: the ``queue`` capability of a SQL storage; what the keys mean and
what those operations promise is :mod:`memory_sql.queue.manage`'s).

A selection of rows is given as *key patterns*: ``(tenant, user, agent, thread, kind)`` tuples
whose ``None`` parts match any value (``agent`` ``""`` is the unnamed agents').
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..schema import memory_pending_updates as pending
from ..schema import memory_scopes
from ..schema import memory_watermarks as marks
from . import watermarks
from .dialects import SQLDialect, dialect_of

KeyPattern = tuple[str, str, str | None, str | None, str | None]
"""(tenant, user, agent, thread, kind); None matches any value."""

_COLUMNS = (
    pending.c.tenant_id,
    pending.c.user_id,
    pending.c.agent_name,
    pending.c.thread_id,
    pending.c.kind,
    pending.c.status,
    pending.c.attempts,
    pending.c.last_error,
    pending.c.due_at,
    pending.c.first_enqueued_at,
    pending.c.last_enqueued_at,
    pending.c.lease_until,
)
_ORDER = (
    pending.c.status,  # failed before pending
    pending.c.due_at,
    pending.c.tenant_id,
    pending.c.user_id,
    pending.c.agent_name,
    pending.c.thread_id,
    pending.c.kind,
)
_PATTERN_COLUMNS = ("tenant_id", "user_id", "agent_name", "thread_id", "kind")


def count_statement(now: datetime) -> sa.Select[int, int, int, int]:
    """The queue's rows ``pending`` (waiting or running), ``failed`` (given up), ``leased``
    (running anywhere now) and ``due`` (waiting and due now), as one row of those columns."""
    leased = sa.and_(pending.c.lease_until.is_not(None), pending.c.lease_until >= now)
    due = sa.and_(pending.c.status == "pending", pending.c.due_at <= now, ~leased)
    return sa.select(
        sa.func.count().filter(pending.c.status == "pending").label("pending"),
        sa.func.count().filter(pending.c.status == "failed").label("failed"),
        sa.func.count().filter(leased).label("leased"),
        sa.func.count().filter(due).label("due"),
    )


def list_rows(
    engine: Engine,
    *,
    failed_only: bool = False,
    tenant_id: str | None = None,
    user_id: str | None = None,
    agent_key: str | None = None,
    limit: int | None = None,
) -> list[Any]:
    """The rows (the columns of :data:`_COLUMNS`), failed first, then by due time.

    Raises:
        StorageError: the database failed.
    """
    query = sa.select(*_COLUMNS).order_by(*_ORDER).limit(limit)
    if failed_only:
        query = query.where(pending.c.status == "failed")
    for column, value in (
        (pending.c.tenant_id, tenant_id),
        (pending.c.user_id, user_id),
        (pending.c.agent_name, agent_key),
    ):
        if value is not None:
            query = query.where(column == value)
    with database_errors(engine, "reading the update queue"), engine.connect() as conn:
        return list(conn.execute(query).all())


def count_rows(engine: Engine, now: datetime, *, tenant_id: str | None = None) -> dict[str, int]:
    """:func:`count_statement`'s counts of ``tenant_id``'s rows (None: every tenant's).

    Raises:
        StorageError: the database failed.
    """
    query = count_statement(now)
    if tenant_id is not None:
        query = query.where(pending.c.tenant_id == tenant_id)
    with database_errors(engine, "reading the update queue"), engine.connect() as conn:
        return dict(conn.execute(query).mappings().one())


def change_rows(
    engine: Engine,
    patterns: Sequence[KeyPattern] | None,
    *,
    tenant_id: str | None,
    now: datetime,
    what: str,
    drop: bool,
    values: dict[str, Any] | None = None,
    check: Callable[[list[Any]], None] | None = None,
) -> list[Any]:
    """In one write transaction, the rows ``patterns`` name (None: every ``failed`` row, of
    ``tenant_id`` if given), locked; ``check`` is called with them (what it raises rolls
    back); then those not leased now are deleted (``drop``) or updated to ``values``.
    Returns the rows as they were.

    Raises:
        StorageError: the database failed.
    """
    if patterns is None:
        selected: sa.ColumnElement[bool] = pending.c.status == "failed"
        if tenant_id is not None:
            selected = sa.and_(selected, pending.c.tenant_id == tenant_id)
    else:
        selected = sa.or_(*(_condition(pattern) for pattern in patterns))
    running = sa.and_(pending.c.lease_until.is_not(None), pending.c.lease_until >= now)
    dialect = dialect_of(engine)
    with database_errors(engine, what), engine.connect() as conn:
        conn = conn.execution_options(**dialect.write_options)
        with conn.begin():
            query = dialect.lock_rows(sa.select(*_COLUMNS).where(selected).order_by(*_ORDER))
            rows = list(conn.execute(query))
            if check is not None:
                check(rows)
            if rows:
                where = sa.and_(selected, ~running)
                change = (
                    sa.delete(pending).where(where)
                    if drop
                    else sa.update(pending).where(where).values(**(values or {}))
                )
                conn.execute(change)
    return rows


def _condition(pattern: KeyPattern) -> sa.ColumnElement[bool]:
    return sa.and_(
        *(
            pending.c[name] == value
            for name, value in zip(_PATTERN_COLUMNS, pattern, strict=True)
            if value is not None
        )
    )


def rows_of_threads(engine: Engine, keys: Sequence[tuple[str, str, str, str]]) -> list[Any]:
    """The rows of the threads ``keys`` name (``(tenant, user, agent key, thread)``): their key
    columns, ``status``, ``attempts``, ``last_error``.

    Raises:
        StorageError: the database failed.
    """
    columns = (pending.c.tenant_id, pending.c.user_id, pending.c.agent_name, pending.c.thread_id)
    wanted = list(keys)
    found: list[Any] = []
    with database_errors(engine, "reading the update queue"), engine.connect() as conn:
        for start in range(0, len(wanted), 500):
            found.extend(
                conn.execute(
                    sa.select(
                        *columns, pending.c.status, pending.c.attempts, pending.c.last_error
                    ).where(sa.tuple_(*columns).in_(wanted[start : start + 500]))
                )
            )
    return found


# A worker's run ----------------------------------------------------------------------------
# The statements of a claim and a completion (memory_sql.queue.pending), built once; their
# parameters are named key_<column> (the row's key), owner, until, generation, and for the
# watermark message_key, position, updated_at (the key parameters are the watermark's too).

KEY_COLUMNS = ("tenant_id", "user_id", "agent_name", "thread_id", "kind")
MEMORY = (pending.c.tenant_id, pending.c.user_id, pending.c.agent_name)
KEY = (*MEMORY, pending.c.thread_id)
_sibling = pending.alias("sibling")
_IS_BOUND_KEY = sa.and_(*(pending.c[name] == sa.bindparam(f"key_{name}") for name in KEY_COLUMNS))


_NOW = sa.bindparam("now", type_=pending.c.due_at.type)


@functools.cache
def lease(*, check_memories: bool) -> Any:
    """Lease the rows of ``keys`` (a list of (tenant, user, agent, thread, kind)) to ``owner``
    until ``until`` (parameters), counting the attempt; returns the keys leased.
    ``check_memories``: skip a row whose memory has another row under a live lease at ``now``
    (a concurrent claim's, committed before this statement began)."""
    statement = (
        sa.update(pending)
        .where(sa.tuple_(*KEY, pending.c.kind).in_(sa.bindparam("keys", expanding=True)))
        .values(
            lease_owner=sa.bindparam("owner"),
            lease_until=sa.bindparam("until"),
            attempts=pending.c.attempts + 1,
        )
        .returning(*KEY, pending.c.kind)
    )
    if check_memories:
        statement = statement.where(~memory_leased(_NOW))
    return statement


DELETE_RUN = sa.delete(pending).where(
    _IS_BOUND_KEY,
    pending.c.generation == sa.bindparam("generation"),
    pending.c.lease_owner == sa.bindparam("owner"),
)
"""Delete a completed row: still of the run's ``generation`` and leased to ``owner``."""


@functools.cache
def delete_run_moving_mark(dialect: SQLDialect) -> Any:
    """:data:`DELETE_RUN` with the thread's watermark upsert in a CTE: both in one round trip
    (databases that write in CTEs, :attr:`SQLDialect.writes_in_ctes`). The CTE always runs,
    whether or not the row is deleted, as the watermark moved before the delete did."""
    moved = watermarks.upsert(dialect).returning(marks.c.position).cte("moved")
    return DELETE_RUN.add_cte(moved)


_Q_KEY = " AND ".join(f"{name} = %(q_{name})s" for name in KEY_COLUMNS)
# The row still of the run's generation (a newer conversation, which a completion must release
# instead of deleting, is rare: the save's transactional form does that) and leased to it.
_COMPLETION_REQUIRES = (
    (
        "leased",
        f"""
    SELECT FROM {pending.name}
    WHERE {_Q_KEY} AND generation = %(q_generation)s AND lease_owner = %(q_owner)s
    FOR UPDATE""",
    ),
)
_COMPLETION_CTES = (
    f"""completed AS (
    DELETE FROM {pending.name}
    WHERE {_Q_KEY} AND generation = %(q_generation)s AND lease_owner = %(q_owner)s
      AND EXISTS (SELECT FROM head)
)""",
)
_MARK_KEY = ", ".join(KEY_COLUMNS[:4])
_MARK_CTE = (
    f"""marked AS (
    INSERT INTO {marks.name} ({_MARK_KEY}, message_key, position, updated_at)
    SELECT {", ".join(f"%(q_{name})s" for name in KEY_COLUMNS[:4])},
           %(q_message_key)s, %(q_position)s, %(q_now)s
    WHERE EXISTS (SELECT FROM head)
    ON CONFLICT ({_MARK_KEY}) DO UPDATE SET message_key = excluded.message_key,
        position = excluded.position, updated_at = excluded.updated_at
)""",
)


def unleased(now: datetime | sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
    return sa.or_(pending.c.lease_until.is_(None), pending.c.lease_until < now)


def memory_leased(now: datetime | sa.BindParameter[Any]) -> sa.ColumnElement[bool]:
    """Some row of the same memory (tenant, user, agent) is under an unexpired lease.

    Asked as membership in the few memories being updated (found through the lease index),
    not as a correlated EXISTS: that would read every sibling of every due row, quadratic in
    the rows of one busy user."""
    running = sa.select(_sibling.c.tenant_id, _sibling.c.user_id, _sibling.c.agent_name).where(
        _sibling.c.lease_until >= now
    )
    return sa.tuple_(*MEMORY).in_(running)


@functools.cache
def claimable(dialect: SQLDialect, *, skipping: bool, with_marks: bool) -> sa.Select[Any]:
    """Due (at ``now``), unleased rows of memories with no live lease, but (``skipping``)
    the memories ``skipped`` (a list of (tenant, user, agent)), in due order (read along the
    ``(status, due_at)`` index, which stops at ``limit``), locked and skipping rows another
    claim locked; ``now``, ``limit`` and ``skipped`` are parameters. ``with_marks``: each with
    its thread's watermark (``mark_key``, ``mark_position``, NULL when it has none) read by a
    LEFT JOIN, so the run needs no statement of its own to read it. Each row comes with its
    memory's stamp (``memory_version``, ``memory_created_at``; NULL: nothing stored), so that
    the run's load needs none either while the storage's cache holds that version."""
    now = _NOW
    query = (
        sa.select(*KEY, pending.c.kind, pending.c.messages, pending.c.correction)
        .add_columns(pending.c.reinforcement, pending.c.generation, pending.c.attempts)
        .add_columns(pending.c.reply)
        .where(
            pending.c.status == "pending",
            pending.c.due_at <= now,
            unleased(now),
            ~memory_leased(now),
        )
        .order_by(pending.c.due_at)
        .limit(sa.bindparam("limit", type_=sa.Integer))
    )
    joined = pending.outerjoin(
        memory_scopes,
        sa.and_(*(memory_scopes.c[name] == pending.c[name] for name in KEY_COLUMNS[:3])),
    )
    query = query.add_columns(
        memory_scopes.c.version.label("memory_version"),
        memory_scopes.c.created_at.label("memory_created_at"),
    )
    if with_marks:
        joined = joined.outerjoin(
            marks,
            sa.and_(*(marks.c[name] == pending.c[name] for name in KEY_COLUMNS[:4])),
        )
        query = query.add_columns(
            marks.c.message_key.label("mark_key"), marks.c.position.label("mark_position")
        )
    query = query.select_from(joined)
    if skipping:
        query = query.where(sa.tuple_(*MEMORY).not_in(sa.bindparam("skipped", expanding=True)))
    return dialect.lock_rows(query, of=pending, skip_locked=True)


def _next_due() -> sa.Select[Any]:
    """One row of two times: the earliest due time of a pending row that can be claimed (no
    live lease on it nor on its memory), and the earliest end of a live lease of another owner
    than ``owner`` (its runs renew their leases), at ``now``; ``now`` and ``owner`` are
    parameters. One statement, one round trip."""
    # A row of a memory with a row leased waits for that run: for ours, its end wakes the
    # worker; for another process's, the end of that lease does.
    due = sa.select(sa.func.min(pending.c.due_at)).where(
        pending.c.status == "pending", unleased(_NOW), ~memory_leased(_NOW)
    )
    lease_end = sa.select(sa.func.min(pending.c.lease_until)).where(
        pending.c.status == "pending",
        pending.c.lease_until >= _NOW,
        pending.c.lease_owner != sa.bindparam("owner"),
    )
    return sa.select(due.scalar_subquery(), lease_end.scalar_subquery())


NEXT_DUE = _next_due()
"""The worker's question after each claim (built once: a statement built at every call cost
as much as running it)."""


_SELECT_FOR_ADD = sa.select(
    pending.c.first_enqueued_at,
    pending.c.correction,
    pending.c.reinforcement,
    pending.c.status,
    pending.c.messages,
    pending.c.lease_until,
)


def _is_key(key: dict[str, str]) -> sa.ColumnElement[bool]:
    return sa.and_(*(pending.c[name] == value for name, value in key.items()))


class QueueRows:
    """Every statement :class:`~memory_sql.queue.UpdateQueue` runs on its rows, for one
    database kind. A *key* is the row's ``{tenant_id, user_id, agent_name, thread_id, kind}``;
    what each change means is the queue's (:mod:`memory_sql.queue.pending`)."""

    def __init__(self, dialect: SQLDialect) -> None:
        self.dialect = dialect

    # enqueue

    def insert_new(self) -> Any:
        """Insert rows whose key is free (many parameter sets: SQLAlchemy's insertmanyvalues
        sends multi-row INSERTs), returning the keys inserted."""
        return self.dialect.insert_ignore(pending).returning(*KEY, pending.c.kind)

    # An add's statements are built once, the values as parameters: built at every add, the
    # insert alone cost about a third of an after_agent's CPU.

    @functools.cached_property
    def insert_one(self) -> Any:
        """Insert one row unless its key is taken, returning its generation if inserted; the
        row's columns are the parameters."""
        return self.dialect.insert_ignore(pending).returning(pending.c.generation)

    @functools.cached_property
    def select_for_add(self) -> sa.Select[Any]:
        """The waiting row of the key ``key_<column>`` an add merges into, locked."""
        return self.dialect.lock_rows(_SELECT_FOR_ADD.where(_IS_BOUND_KEY))

    MERGED = (
        "messages",
        "correction",
        "reinforcement",
        "first_enqueued_at",
        "last_enqueued_at",
        "due_at",
    )
    """The columns :attr:`merge` sets from parameters (named ``new_<column>``)."""

    @functools.cached_property
    def merge(self) -> Any:
        """The row of the key ``key_<column>`` replaced by a newer conversation (the values
        ``new_<column>`` of :data:`MERGED`): its generation moves on, it is pending again, a
        failed row's attempts start over."""
        return (
            sa.update(pending)
            .where(_IS_BOUND_KEY)
            .values(
                **{name: sa.bindparam(f"new_{name}") for name in self.MERGED},
                generation=pending.c.generation + 1,
                status="pending",
                attempts=sa.case((pending.c.status == "failed", 0), else_=pending.c.attempts),
                last_error=None,
                reply=None,
            )
        )

    # work

    def claimable(self, *, skipping: bool, with_marks: bool) -> sa.Select[Any]:
        """:func:`claimable` of this database."""
        return claimable(self.dialect, skipping=skipping, with_marks=with_marks)

    @staticmethod
    @functools.cache
    def advisory_locks(count: int) -> sa.Select[Any]:
        """Try PostgreSQL's transaction-scoped advisory lock ``(lock_class, id<n>)`` of each
        ``n`` below ``count`` (parameters): one row, a boolean per id."""
        lock_class = sa.bindparam("lock_class", type_=sa.Integer)
        return sa.select(
            *(
                sa.func.pg_try_advisory_xact_lock(
                    lock_class, sa.bindparam(f"id{n}", type_=sa.Integer)
                )
                for n in range(count)
            )
        )

    def lease(self) -> Any:
        """:func:`lease`, checking the memories where rows lock."""
        return lease(check_memories=self.dialect.locks_rows())

    @staticmethod
    def mark_failed(key: dict[str, str], problem: str) -> Any:
        """The row of ``key`` given up: ``failed`` with ``problem``, its lease ended."""
        return (
            sa.update(pending)
            .where(_is_key(key))
            .values(status="failed", last_error=problem, lease_owner=None, lease_until=None)
        )

    @staticmethod
    def renew(key: dict[str, str], owner: str, until: datetime) -> Any:
        """The lease of ``key``'s row extended to ``until``, if still ``owner``'s."""
        return (
            sa.update(pending)
            .where(_is_key(key), pending.c.lease_owner == owner)
            .values(lease_until=until)
        )

    def complete(self, *, with_mark: bool) -> Any:
        """:data:`DELETE_RUN`, moving the watermark in the same statement (``with_mark``, a
        database that writes in CTEs)."""
        return delete_run_moving_mark(self.dialect) if with_mark else DELETE_RUN

    def completion_in_one_statement(
        self, *, with_mark: bool
    ) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]] | None:
        """:meth:`complete` as parts of a memory save's one statement
        (:class:`~.with_save.WithTheSave`), None where the database does not write in CTEs:
        the row locked while leased to the owner at the run's generation (the save's claim
        needs it: a newer conversation, which :meth:`release_for_newer` must keep, leaves the
        save to its transactional form), then deleted and the watermark moved, with the save.
        Parameters: ``q_<key column>``, ``q_owner``, ``q_generation`` and, with the mark,
        ``q_message_key``, ``q_position``, ``q_now``."""
        if not self.dialect.writes_in_ctes:
            return None
        return _COMPLETION_REQUIRES, _COMPLETION_CTES + (_MARK_CTE if with_mark else ())

    @staticmethod
    def release_for_newer(key: dict[str, str], owner: str) -> Any:
        """A run completed while a newer conversation waits: the row stays, released, its
        maximum wait counted from that conversation."""
        return (
            sa.update(pending)
            .where(_is_key(key), pending.c.lease_owner == owner)
            .values(
                lease_owner=None,
                lease_until=None,
                attempts=0,
                last_error=None,
                first_enqueued_at=pending.c.last_enqueued_at,
            )
        )

    @staticmethod
    def postpone(
        key: dict[str, str], owner: str, due: datetime, note: str, generation: int, reply: Any
    ) -> Any:
        """The row given back to run at ``due``, its attempt not counted, keeping ``reply``
        unless a newer conversation (another ``generation``) arrived."""
        return (
            sa.update(pending)
            .where(_is_key(key), pending.c.lease_owner == owner)
            .values(
                lease_owner=None,
                lease_until=None,
                attempts=pending.c.attempts - 1,
                due_at=due,
                last_error=note,
                reply=sa.case((pending.c.generation == generation, reply), else_=None),
            )
        )

    def select_for_fail(self, key: dict[str, str], owner: str) -> sa.Select[Any]:
        """The generation, attempts and messages of ``key``'s row if ``owner`` leases it,
        locked."""
        query = sa.select(pending.c.generation, pending.c.attempts, pending.c.messages)
        return self.dialect.lock_rows(query.where(_is_key(key), pending.c.lease_owner == owner))

    @staticmethod
    def update(key: dict[str, str], values: dict[str, Any]) -> Any:
        """The row of ``key`` set to ``values``."""
        return sa.update(pending).where(_is_key(key)).values(**values)

    @staticmethod
    def give_back(key: dict[str, str], owner: str) -> Any:
        """The row of ``key`` released unrun by ``owner``, its attempt not counted."""
        return (
            sa.update(pending)
            .where(_is_key(key), pending.c.lease_owner == owner)
            .values(lease_owner=None, lease_until=None, attempts=pending.c.attempts - 1)
        )

    # scheduling and reporting

    @staticmethod
    def next_due() -> sa.Select[Any]:
        """:data:`NEXT_DUE`."""
        return NEXT_DUE

    @staticmethod
    def make_all_due(now: datetime) -> Any:
        """Every pending row not yet due made due ``now``."""
        return (
            sa.update(pending)
            .where(pending.c.status == "pending", pending.c.due_at > now)
            .values(due_at=now)
        )

    @staticmethod
    def counts(now: datetime) -> sa.Select[int, int, int, int]:
        """:func:`count_statement`."""
        return count_statement(now)

    @staticmethod
    def oldest_pending() -> sa.Select[Any]:
        """When the oldest pending row was first queued."""
        return sa.select(sa.func.min(pending.c.first_enqueued_at)).where(
            pending.c.status == "pending"
        )
