"""The rows of the memory-LLM's use: one per call (``memory_llm_calls``, revision 0007), the
reply parts a call's checks refused (``memory_llm_rejections``), and the updates the daily
budget held back, per tenant and day (``memory_llm_budget_holds``, revision 0012).

The ``llm_budgets`` capability of a SQL storage (:mod:`.capabilities`); the budget's rules are
:mod:`memory_sql.update.budget`'s, the records' contents :mod:`memory_sql.update.updater`'s.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..database import database_errors
from ..schema import memory_llm_budget_holds, memory_llm_calls, memory_llm_rejections
from ..scope import Scope
from ..tenancy import acting_for
from .dialects import dialect_of
from .with_save import WithTheSave, json_ready, json_text

_INSERT_CALL = memory_llm_calls.insert()
"""The usage row of one LLM call (its values bound per call: one compiled statement)."""


def count_hold(engine: Engine, tenant_id: str, day: date, now: datetime, reason: str) -> None:
    """Add one update held back by the budget to ``tenant_id``'s row of ``day``.

    Raises:
        StorageError: the database failed.
    """
    holds = memory_llm_budget_holds.c
    statement = dialect_of(engine).upsert(
        memory_llm_budget_holds,
        {
            "tenant_id": tenant_id,
            "day": day,
            "holds": 1,
            "last_held_at": now,
            "last_reason": reason,
        },
        keys=("tenant_id", "day"),
        set_={"holds": holds.holds + 1, "last_held_at": now, "last_reason": reason},
    )
    with (
        database_errors(engine, "count an update held by the LLM budget"),
        acting_for(tenant_id),
        engine.begin() as conn,
    ):
        conn.execute(statement)


def usage_since(engine: Engine, tenant_id: str, start: datetime) -> tuple[int, int]:
    """``tenant_id``'s LLM calls since ``start``, and their tokens (prompt + completion).

    Raises:
        StorageError: the database failed.
    """
    calls = memory_llm_calls.c
    with (
        database_errors(engine, "read the day's LLM usage"),
        acting_for(tenant_id),
        engine.connect() as conn,
    ):
        row = conn.execute(
            sa.select(
                sa.func.count(),
                sa.func.coalesce(sa.func.sum(calls.prompt_tokens + calls.completion_tokens), 0),
            ).where(calls.tenant_id == tenant_id, calls.called_at >= start)
        ).one()
    return int(row[0]), int(row[1])


def last_review_offered(engine: Engine, scope: Scope) -> datetime | None:
    """When a call of ``scope``'s memory last offered stale facts for review (None: never).

    Raises:
        StorageError: the database failed.
    """
    calls = memory_llm_calls.c
    last = sa.select(sa.func.max(calls.called_at)).where(
        calls.tenant_id == scope.tenant_id,
        calls.user_id == scope.user_id,
        calls.agent_name == scope.agent_key,
        calls.stale_offered > 0,
    )
    with database_errors(engine, f"memory {scope}: read the last review"), engine.connect() as conn:
        return conn.execute(last).scalar()


def record_call(
    connection: Connection,
    call: Mapping[str, Any],
    rejected: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Write one call's usage row (the columns of ``memory_llm_calls``), and its refused reply
    parts, on ``connection`` (the caller's transaction: a save's, or one of its own)."""
    connection.execute(_INSERT_CALL, dict(call))
    if rejected:
        connection.execute(memory_llm_rejections.insert(), [dict(row) for row in rejected])


_CALL_IN_ONE_STATEMENT = f"""llm_call AS (
    INSERT INTO {memory_llm_calls.name}
    SELECT * FROM json_populate_record(NULL::{memory_llm_calls.name}, %(llm_call)s::json)
    WHERE EXISTS (SELECT FROM head)
)"""
"""The usage row as one JSON parameter: psycopg converts (and caches) the text of a statement
of at most 50 parameters only, and the save's fact and queue row take most of those."""


def call_with_the_save(
    engine: Engine,
    call: Mapping[str, Any],
    rejected: Sequence[Mapping[str, Any]],
    saved: Callable[[], object],
) -> WithTheSave:
    """:func:`record_call` as writes that commit with a memory's save: in its one statement
    where the database writes in CTEs and no reply part was refused; ``saved`` is called once
    they committed. ``call`` must hold every column: ``json_populate_record`` gives a missing
    one NULL, not its default, and the save would fail on a NOT NULL column."""

    def write(connection: Connection) -> None:
        record_call(connection, call, rejected)

    if rejected or not dialect_of(engine).writes_in_ctes:
        return WithTheSave(write=write, ctes=None, saved=saved)
    return WithTheSave(
        write=write,
        ctes=(_CALL_IN_ONE_STATEMENT,),
        parameters={"llm_call": json_text(json_ready(call))},
        saved=saved,
    )


def has_table(engine: Engine, table: str, on_missing: Callable[[], None] | None = None) -> bool:
    """Whether ``engine``'s database has ``table`` (an older schema may lack the usage
    tables), asked once per engine (``on_missing`` is called when the answer is no); False,
    asked again next time, when the database cannot tell now."""
    with _LOCK:
        known = _TABLES.get(engine, {}).get(table)
    if known is not None:
        return known
    try:
        known = sa.inspect(engine).has_table(table)
    except Exception:
        return False
    if not known and on_missing is not None:
        on_missing()
    with _LOCK:
        _TABLES.setdefault(engine, {})[table] = known
    return known


_TABLES: weakref.WeakKeyDictionary[Engine, dict[str, bool]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
