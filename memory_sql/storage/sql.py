"""The SQL store: PostgreSQL (psycopg 3) and SQLite through one SQLAlchemy Core implementation."""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from typing import Any, NoReturn, Unpack, cast

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import URL, Connection, Engine

from ..database import database_errors, reconnecting, redacted
from ..driver_errors import is_refusal
from ..errors import DuplicateFactError, StorageError, VersionConflictError
from ..migrations import ensure_at_head, open_engine
from ..models import (
    Fact,
    MemoryDocument,
    Section,
    copy_model,
    fact_digest,
    trusted_fact,
    utcnow,
)
from ..schema import (
    FACT_COLUMNS,
    LIVE,
    UTCDateTime,
    memory_fact_events,
    memory_facts,
    memory_scopes,
    memory_sections,
)
from ..scope import Scope
from ..tenancy import acting_for
from ..text_search import search_text
from .base import (
    Changes,
    MemoryStorage,
    Seen,
    _checked_save,
    apply_changes,
    check_fact_ids,
    diff_documents,
    sort_facts,
)
from .cache import DEFAULT_CACHE_SCOPES, DocumentCache
from .capabilities import SQL_CAPABILITIES
from .dialects import SQLDialect, SQLite, dialect_of
from .driver import (
    DriverConnection,
    DriverFallback,
    driver_statement,
    driver_write,
    pg_times,
    sqlite_times,
    unobserved,
)
from .redactions import record_redactions
from .search import match_facts
from .with_save import WithTheSave, json_ready, json_text, with_the_save


def _in_scope(table: sa.Table) -> sa.ColumnElement[bool]:
    """The scope filter, bound by name: statements built once and reused skip SQLAlchemy's
    per-call construction and cache-key work on the hot load path."""
    return sa.and_(
        table.c.tenant_id == sa.bindparam("scope_tenant"),
        table.c.user_id == sa.bindparam("scope_user"),
        table.c.agent_name == sa.bindparam("scope_agent"),
    )


_SELECT_HEAD = sa.select(
    memory_scopes.c.version, memory_scopes.c.created_at, memory_scopes.c.updated_at
).where(_in_scope(memory_scopes))


# A whole document in one statement, hence one snapshot: the scope's facts, its head (version
# and times: no row, no memory), its sections, told apart by ``kind``; each part of the union
# reads its own table by the scope's key, with no join. The facts come first (their columns
# give the union's types) and the other rows reuse their columns, so that a fact row carries
# nothing but its kind: the head's version as text in ``fact_id``, its times in the facts'
# ``created_at`` and ``updated_at``; a section's name, summary and time in ``fact_id``,
# ``content`` and ``updated_at``. Only live facts: the partial indexes of revision 0015 cover
# them, so closed rows cost a load nothing.
_AGING = len(FACT_COLUMNS) - 8  # the validity and confirmation columns after updated_at
_SELECT_DOCUMENT: sa.CompoundSelect[Unpack[tuple[Any, ...]]] = sa.union_all(
    sa.select(sa.literal_column("'f'", sa.String).label("kind"), *FACT_COLUMNS).where(
        _in_scope(memory_facts), LIVE
    ),
    sa.select(
        sa.literal_column("'h'", sa.String),
        sa.cast(memory_scopes.c.version, sa.String),
        *[sa.null()] * 5,
        memory_scopes.c.created_at,
        memory_scopes.c.updated_at,
        *[sa.null()] * _AGING,
    ).where(_in_scope(memory_scopes)),
    sa.select(
        sa.literal_column("'s'", sa.String),
        memory_sections.c.section,
        memory_sections.c.summary,
        *[sa.null()] * 5,
        memory_sections.c.updated_at,
        *[sa.null()] * _AGING,
    ).where(_in_scope(memory_sections)),
)
# A past view (as_of): the facts believed then, closed ones with their end and successor.
_SELECT_FACTS_AS_OF = sa.select(
    *FACT_COLUMNS, memory_facts.c.valid_to, memory_facts.c.superseded_by
).where(
    _in_scope(memory_facts),
    sa.func.coalesce(memory_facts.c.valid_from, memory_facts.c.created_at)
    <= sa.bindparam("as_of", type_=UTCDateTime),
    sa.or_(LIVE, memory_facts.c.valid_to > sa.bindparam("as_of", type_=UTCDateTime)),
)
_SELECT_SECTIONS = sa.select(
    memory_sections.c.section, memory_sections.c.summary, memory_sections.c.updated_at
).where(_in_scope(memory_sections))
_BUMP_VERSION = (
    sa.update(memory_scopes)
    .where(_in_scope(memory_scopes), memory_scopes.c.version == sa.bindparam("expected"))
    .values(version=memory_scopes.c.version + 1, updated_at=sa.bindparam("now"))
    .returning(memory_scopes.c.created_at)
)


def _scope_params(scope: Scope) -> dict[str, str]:
    return {
        "scope_tenant": scope.tenant_id,
        "scope_user": scope.user_id,
        "scope_agent": scope.agent_key,
    }


def _scope_values(scope: Scope) -> dict[str, str]:
    return {"tenant_id": scope.tenant_id, "user_id": scope.user_id, "agent_name": scope.agent_key}


def _fact_columns(fact: Fact) -> dict[str, Any]:
    """A fact's values by the names of the ``memory_facts`` columns that hold them."""
    return {
        "fact_id": fact.id,
        "content": fact.content,
        "content_key": fact_digest(fact.content),
        "search_text": search_text(fact.content),
        "category": fact.category,
        "confidence": fact.confidence,
        "source_thread_id": fact.source_thread_id,
        "source_error": fact.source_error,
        "created_at": fact.created_at,
        "updated_at": fact.updated_at,
        "expected_valid_days": fact.expected_valid_days,
        "confirmed_at": fact.confirmed_at,
        "confirmation_count": fact.confirmation_count,
        "valid_from": fact.valid_from,
        "valid_to": fact.valid_to,
        "superseded_by": fact.superseded_by,
    }


def _fact_row(scope: Scope, fact: Fact) -> dict[str, Any]:
    return {**_scope_values(scope), **_fact_columns(fact)}


_CONTENT_COLUMNS = ("content", "content_key", "search_text")
"""The columns that follow a fact's text (its casefold key and searchable text)."""
_VALUE_COLUMNS = (
    "category",
    "confidence",
    "source_thread_id",
    "source_error",
    "expected_valid_days",
    "confirmed_at",
    "confirmation_count",
    "valid_from",
)
"""The columns of a fact's other values an update may change (not its id, scope or creation
time)."""


def _changed_columns(fact: Fact, old: Fact) -> tuple[str, ...]:
    """The columns an update of the stored ``old`` to ``fact`` writes: those whose value
    changed, and ``updated_at``. An unchanged text costs neither its digest nor its searchable
    text (the tokenizer), and on PostgreSQL an update that moves no indexed column may stay
    on its page (HOT) without new index entries."""
    columns: tuple[str, ...] = _CONTENT_COLUMNS if fact.content != old.content else ()
    columns += tuple(name for name in _VALUE_COLUMNS if getattr(fact, name) != getattr(old, name))
    return (*columns, "updated_at")


def _update_values(fact: Fact, columns: tuple[str, ...]) -> dict[str, Any]:
    """``fact``'s values of ``columns`` (of :func:`_changed_columns`), by column name."""
    values: dict[str, Any] = {}
    for name in columns:
        if name == "content_key":
            values[name] = fact_digest(fact.content)
        elif name == "search_text":
            values[name] = search_text(fact.content)
        else:
            values[name] = getattr(fact, name)
    return values


def _placeholder_key(fact_id: str) -> str:
    """A content_key no digest can equal (digests are lower-case hex), unique per fact."""
    return "~" + hashlib.sha256(fact_id.encode("utf-8")).hexdigest()[:63]


@functools.cache
def _insert_new_scope(dialect: SQLDialect) -> Any:
    """A new memory's head row at version 1 (``now``), unless the scope has one: built once."""
    return (
        dialect.insert_ignore(memory_scopes)
        .values(
            tenant_id=sa.bindparam("scope_tenant"),
            user_id=sa.bindparam("scope_user"),
            agent_name=sa.bindparam("scope_agent"),
            version=1,
            created_at=sa.bindparam("now"),
            updated_at=sa.bindparam("now"),
        )
        .returning(memory_scopes.c.created_at)
    )


def _document(
    rows: Any, times: Callable[[Any], list[datetime | None]] | None = None
) -> tuple[MemoryDocument, tuple[int, datetime]] | None:
    """The document of the rows of :data:`_SELECT_DOCUMENT` (SQLAlchemy's rows, or the
    driver's tuples with ``times`` turning a column of timestamps into UTC ``datetime``s) and
    its cache stamp (version, scope creation time); None without a head row: no memory.

    Facts are built and ordered column by column (``map`` over the columns, not a loop over
    rows): most of a cold load's time is here."""
    kinds = list(map(_KIND, rows))
    facts_first = kinds.count("f")
    if kinds[:facts_first].count("f") == facts_first:  # as the union lists them
        fact_rows, others = rows[:facts_first], rows[facts_first:]
    else:
        fact_rows = [row for row in rows if row[0] == "f"]
        others = [row for row in rows if row[0] != "f"]
    head = next((row for row in others if row[0] == "h"), None)
    if head is None:
        return None
    version, created_at, last_updated = int(head[1]), head[7], head[8]
    if times is not None:
        created_at, last_updated = times((created_at, last_updated))
    doc = copy_model(MemoryDocument(), version=version, last_updated=last_updated)
    for row in others:
        if row[0] == "s":
            name, updated_at = row[1], row[8] if times is None else times((row[8],))[0]
            group = doc.user if hasattr(doc.user, name) else doc.history
            setattr(group, name, Section(summary=row[2], updated_at=updated_at))
    if fact_rows:
        columns: list[Any] = list(zip(*fact_rows, strict=True))
        ids, created, updated = columns[1], columns[7], columns[8]
        if times is not None:
            created, updated = times(created), times(updated)
        aging: Sequence[Any] = columns[9:]
        if times is not None:
            aging = (aging[0], times(aging[1]), aging[2], times(aging[3]))
        facts = list(map(trusted_fact, *columns[1:7], created, updated, *aging))
        # Ordered here (as sort_facts orders: created_at, then id), not by ORDER BY, which can
        # lure a planner onto a tenant-wide time index; by keys zipped from the columns.
        keys = list(zip(created, ids, strict=True))
        order = sorted(range(len(facts)), key=keys.__getitem__)
        doc = copy_model(doc, facts=list(map(facts.__getitem__, order)))
    return doc, (version, created_at)


_KIND = operator.itemgetter(0)


class _IdTaken(Exception):
    """A new fact's id is held by a row (a closed version, or a repeated id): the save is
    tried again making way for it."""


def _id_taken(exc: BaseException) -> bool:
    """Whether ``exc`` is the facts' primary key refusing an id."""
    return is_refusal(exc, _FACT_ID_KEY)


_FACT_ID_KEY = str(memory_facts.primary_key.name)
_LIVE_CONTENT_KEY = "uq_memory_facts_live_content_key"
"""The unique index of a memory's live facts' casefold keys (schema.py)."""


def _writable_at_once(changes: Changes) -> bool:
    """Whether the writes of ``changes`` may run in any order (the sub-statements of one
    PostgreSQL statement do): no key moves between facts within the save."""
    if len(changes.rekeyed) > 1:
        return False
    if not changes.deleted:
        return True
    freed = {fact.key for fact in changes.removed.values()}
    return not any(fact.key in freed for fact in (*changes.inserted, *changes.updated))


# The save of _save_in_one_statement, for PostgreSQL: every write a data-modifying CTE gated on
# the version check (head), the rows of each passed as one JSON array of objects (one text
# parameter the driver sends as it is, where arrays of columns cost a dumper each), so the text
# is the same whatever the change and the server plans it once.
_HEAD_UPDATE = """
    UPDATE memory_scopes SET version = version + 1, updated_at = %(now)s
    WHERE tenant_id = %(tenant)s AND user_id = %(user)s AND agent_name = %(agent)s
      AND version = %(expected)s AND created_at = %(created_at)s"""
_HEAD_INSERT = """
    INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version, created_at, updated_at)
    VALUES (%(tenant)s, %(user)s, %(agent)s, 1, %(now)s, %(now)s)
    ON CONFLICT DO NOTHING
    RETURNING created_at"""
_HEAD_INSERT_IF = """
    INSERT INTO memory_scopes (tenant_id, user_id, agent_name, version, created_at, updated_at)
    SELECT %(tenant)s, %(user)s, %(agent)s, 1, %(now)s, %(now)s WHERE {needed}
    ON CONFLICT DO NOTHING
    RETURNING created_at"""
_SCOPED = "tenant_id = %(tenant)s AND user_id = %(user)s AND agent_name = %(agent)s"
_FACT_RECORD = """fact_id text, content text, content_key text, search_text text,
                category text, confidence float8, source_thread_id text, source_error text,
                created_at timestamptz, updated_at timestamptz, expected_valid_days int,
                confirmed_at timestamptz, confirmation_count int, valid_from timestamptz,
                valid_to timestamptz, superseded_by text"""
_FACT_INSERT_COLUMNS = """tenant_id, user_id, agent_name, fact_id, content, content_key,
                              search_text, category, confidence, source_thread_id,
                              source_error, created_at, updated_at, expected_valid_days,
                              confirmed_at, confirmation_count, valid_from, valid_to,
                              superseded_by"""
_WRITES = {
    # A removed fact is closed, not deleted (revision 0015).
    "deleted": """
    UPDATE memory_facts AS f SET valid_to = %(now)s, superseded_by = v.superseded_by
    FROM unnest(%(deleted)s::text[], %(successors)s::text[]) AS v(fact_id, superseded_by)
    WHERE f.tenant_id = %(tenant)s AND f.user_id = %(user)s AND f.agent_name = %(agent)s
      AND f.fact_id = v.fact_id AND f.valid_to IS NULL AND EXISTS (SELECT FROM head)""",
    "inserted": f"""
    INSERT INTO memory_facts ({_FACT_INSERT_COLUMNS})
    SELECT %(tenant)s, %(user)s, %(agent)s, v.*
    FROM json_to_recordset(%(inserted)s::json) AS v({_FACT_RECORD})
    WHERE EXISTS (SELECT FROM head)""",
    "events": """
    INSERT INTO memory_fact_events (tenant_id, user_id, agent_name, version, fact_id, event,
                                    category, confidence, occurred_at, content_before,
                                    content_after, superseded_by)
    SELECT %(tenant)s, %(user)s, %(agent)s, %(version)s, v.fact_id, v.event, v.category,
           v.confidence, %(now)s, v.content_before, v.content_after, v.superseded_by
    FROM json_to_recordset(%(events)s::json)
         AS v(fact_id text, event text, category text, confidence float8,
              content_before text, content_after text, superseded_by text)
    WHERE EXISTS (SELECT FROM head)""",
    "sections": """
    INSERT INTO memory_sections (tenant_id, user_id, agent_name, section, summary, updated_at)
    SELECT %(tenant)s, %(user)s, %(agent)s, v.*
    FROM json_to_recordset(%(sections)s::json)
         AS v(section text, summary text, updated_at timestamptz)
    WHERE EXISTS (SELECT FROM head)
    ON CONFLICT (tenant_id, user_id, agent_name, section)
    DO UPDATE SET summary = excluded.summary, updated_at = excluded.updated_at""",
    "emptied": f"""
    DELETE FROM memory_sections
    WHERE {_SCOPED} AND section = ANY(%(emptied)s::text[]) AND EXISTS (SELECT FROM head)""",
    # One row (the common save: one fact added or changed): its values as parameters of
    # their own. The server plans a primary-key update where the JSON join above, planned
    # anew at every execution, costs more to plan than to run.
    "inserted_one": f"""
    INSERT INTO memory_facts ({_FACT_INSERT_COLUMNS})
    SELECT %(tenant)s, %(user)s, %(agent)s, %(i_fact_id)s::text, %(i_content)s::text,
           %(i_content_key)s::text, %(i_search_text)s::text, %(i_category)s::text,
           %(i_confidence)s::float8,
           %(i_source_thread_id)s::text, %(i_source_error)s::text,
           %(i_created_at)s::timestamptz, %(i_updated_at)s::timestamptz,
           %(i_expected_valid_days)s::int, %(i_confirmed_at)s::timestamptz,
           %(i_confirmation_count)s::int, %(i_valid_from)s::timestamptz,
           %(i_valid_to)s::timestamptz, %(i_superseded_by)s::text
    WHERE EXISTS (SELECT FROM head)""",
    "events_one": """
    INSERT INTO memory_fact_events (tenant_id, user_id, agent_name, version, fact_id, event,
                                    category, confidence, occurred_at, content_before,
                                    content_after, superseded_by)
    SELECT %(tenant)s, %(user)s, %(agent)s, %(version)s, %(e_fact_id)s::text,
           %(e_event)s::text, %(e_category)s::text, %(e_confidence)s::float8, %(now)s,
           %(e_content_before)s::text, %(e_content_after)s::text, %(e_superseded_by)s::text
    WHERE EXISTS (SELECT FROM head)""",
}


@functools.lru_cache(maxsize=256)
def _one_statement_sql(
    first: bool,
    writes: tuple[str, ...],
    requires: tuple[tuple[str, str], ...] = (),
    companions: tuple[str, ...] = (),
) -> str:
    """The text of a save that writes ``writes`` (names of :data:`_WRITES`, or
    ``updated_one:<columns>`` for one fact's update of those columns): only the parts a change
    needs, so the server plans no empty sub-statement. ``requires`` and ``companions``: the
    parts of a :class:`~.with_save.WithTheSave` (the claim gated on the first, the second
    gated on the claim)."""
    needed = " AND ".join(f"EXISTS (SELECT FROM {name})" for name, _ in requires)
    if first:
        head = _HEAD_INSERT_IF.format(needed=needed) if needed else _HEAD_INSERT
    else:
        head = _HEAD_UPDATE + (f" AND {needed}" if needed else "") + "\n    RETURNING created_at"
    ctes = [f"{name} AS ({select}\n)" for name, select in requires]
    ctes.append(f"head AS ({head}\n)")
    for name in writes:
        if name.startswith("updated_one:"):
            ctes.append(f"updated_one AS ({_update_one_sql(name.split(':')[1].split(','))}\n)")
        elif name.startswith("updated:"):
            ctes.append(f"updated AS ({_update_many_sql(name.split(':')[1].split(','))}\n)")
        else:
            ctes.append(f"{name} AS ({_WRITES[name]}\n)")
    ctes.extend(companions)
    return "WITH " + ",\n".join(ctes) + "\nSELECT created_at FROM head"


def _update_one_sql(columns: list[str]) -> str:
    """One fact's update of ``columns`` alone (its values as parameters ``u_<column>``): a
    primary-key update the server plans once per set of columns (the JSON join of several
    facts' updates, planned anew at every execution, costs more to plan than to run)."""
    sets = ", ".join(f"{name} = %(u_{name})s" for name in columns)
    return f"""
    UPDATE memory_facts SET {sets}
    WHERE {_SCOPED} AND fact_id = %(u_fact_id)s AND EXISTS (SELECT FROM head)"""


def _update_many_sql(columns: list[str]) -> str:
    """Several facts' update of ``columns``, their values one JSON array of records."""
    sets = ", ".join(f"{name} = v.{name}" for name in columns)
    record = ", ".join(f"{name} {_RECORD_TYPES[name]}" for name in ("fact_id", *columns))
    return f"""
    UPDATE memory_facts AS f SET {sets}
    FROM json_to_recordset(%(updated)s::json) AS v({record})
    WHERE f.tenant_id = %(tenant)s AND f.user_id = %(user)s AND f.agent_name = %(agent)s
      AND f.fact_id = ANY(%(updated_ids)s::text[]) AND f.fact_id = v.fact_id
      AND EXISTS (SELECT FROM head)"""


_RECORD_TYPES = dict(
    part.split() for part in _FACT_RECORD.replace("\n", " ").split(",") if part.strip()
)
"""The columns of :data:`_FACT_RECORD` and their types, in its order."""


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _one_fact(prefix: str, fact: Fact) -> dict[str, Any]:
    """The parameters of a save's lone new fact row, named ``<prefix>_<column>``."""
    return {f"{prefix}_{name}": value for name, value in _fact_columns(fact).items()}


def _fact_records(facts: list[Fact]) -> str | None:
    """``facts`` as the JSON rows of the one-statement save (None: no rows)."""
    if not facts:
        return None
    rows = list(map(_fact_columns, facts))
    for row in rows:
        row["created_at"], row["updated_at"] = _iso(row["created_at"]), _iso(row["updated_at"])
        row["confirmed_at"], row["valid_from"] = _iso(row["confirmed_at"]), _iso(row["valid_from"])
        row["valid_to"] = _iso(row["valid_to"])
    return json_text(rows)


def _one_statement_parameters(
    scope: Scope, changes: Changes, expected: int, created_at: datetime, now: datetime
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The parameters of the one-statement save, and the names of the parts of
    :data:`_WRITES` it needs (a lone fact or event goes by the part's ``_one`` form)."""
    parameters: dict[str, Any] = {
        "tenant": scope.tenant_id,
        "user": scope.user_id,
        "agent": scope.agent_key,
        "now": now,
        "expected": expected,
        "created_at": created_at,
        "version": expected + 1,
    }
    writes: list[str] = []
    if changes.deleted:
        parameters["deleted"] = changes.deleted
        parameters["successors"] = [changes.superseded.get(i) for i in changes.deleted]
        writes.append("deleted")
    updated, inserted = changes.updated, [*changes.inserted, *changes.archived]
    if len(updated) == 1:
        fact = updated[0]
        columns = _changed_columns(fact, changes.previous[fact.id])
        parameters["u_fact_id"] = fact.id
        parameters.update({f"u_{n}": v for n, v in _update_values(fact, columns).items()})
        writes.append("updated_one:" + ",".join(columns))
    elif updated:
        # the columns any of the facts changed (each fact's own values of them: unchanged
        # ones are written as they are stored)
        changed = {c for f in updated for c in _changed_columns(f, changes.previous[f.id])}
        columns = tuple(c for c in _RECORD_TYPES if c in changed)
        parameters["updated"] = json_text(
            [{"fact_id": f.id, **json_ready(_update_values(f, columns))} for f in updated]
        )
        # The primary key of the rows to update, so that the server looks them up one by one
        # rather than joining the records to all the scope's facts.
        parameters["updated_ids"] = [f.id for f in updated]
        writes.append("updated:" + ",".join(columns))
    if len(inserted) == 1:
        parameters.update(_one_fact("i", inserted[0]))
        writes.append("inserted_one")
    elif inserted:
        parameters["inserted"] = _fact_records(inserted)
        writes.append("inserted")
    events = _events(changes)
    if len(events) == 1:
        parameters.update({f"e_{name}": value for name, value in events[0].items()})
        writes.append("events_one")
    elif events:
        parameters["events"] = json_text(events)
        writes.append("events")
    kept = {n: s for n, s in changes.sections.items() if s.summary or s.updated_at is not None}
    if kept:
        parameters["sections"] = json_text(
            [
                {"section": n, "summary": s.summary, "updated_at": _iso(s.updated_at)}
                for n, s in kept.items()
            ]
        )
        writes.append("sections")
    emptied = [n for n in changes.sections if n not in kept]
    if emptied:
        parameters["emptied"] = emptied
        writes.append("emptied")
    return parameters, tuple(writes)


def _events(changes: Changes) -> list[dict[str, Any]]:
    """The events of a save (without scope, version and time): each fact added, updated or
    removed, with its text before and after and, removed, what took its place."""
    previous, successors = changes.previous, changes.superseded
    return [
        *(_event(f, "added", None, f.content) for f in changes.inserted),
        # an unchanged text is written once (the log reads it back as both)
        *(
            _event(f, "updated", _changed(previous[f.id].content, f.content), f.content)
            for f in changes.updated
        ),
        *(
            _event(f, "removed", f.content, None, successors.get(f.id))
            for f in map(changes.removed.__getitem__, changes.deleted)
        ),
    ]


def _changed(before: str, after: str) -> str | None:
    return None if before == after else before


def _event(
    fact: Fact, event: str, before: str | None, after: str | None, successor: str | None = None
) -> dict[str, Any]:
    return {
        "fact_id": fact.id,
        "event": event,
        "category": fact.category,
        "confidence": fact.confidence,
        "content_before": before,
        "content_after": after,
        "superseded_by": successor,
    }


def _event_rows(
    scope: Scope, changes: Changes, version: int, now: datetime
) -> list[dict[str, Any]]:
    """The ``memory_fact_events`` rows of a save that makes ``version``."""
    base = {**_scope_values(scope), "version": version, "occurred_at": now}
    return [{**base, **event} for event in _events(changes)]


# SQLite's driver save claims the version as the one-statement save does on PostgreSQL: the
# scope row at the expected version and creation time (a scope made again never matches).
_CLAIM_VERSION = (
    sa.update(memory_scopes)
    .where(
        _in_scope(memory_scopes),
        memory_scopes.c.version == sa.bindparam("expected"),
        memory_scopes.c.created_at == sa.bindparam("created_at"),
    )
    .values(version=memory_scopes.c.version + 1, updated_at=sa.bindparam("now"))
    .returning(memory_scopes.c.version)
)
_CLAIM_NEW_SCOPE = (  # SQLite's driver path (_write_by_driver_on_sqlite)
    SQLite()
    .insert(memory_scopes)
    .values(
        tenant_id=sa.bindparam("scope_tenant"),
        user_id=sa.bindparam("scope_user"),
        agent_name=sa.bindparam("scope_agent"),
        version=1,
        created_at=sa.bindparam("now"),
        updated_at=sa.bindparam("now"),
    )
    .on_conflict_do_nothing()
    .returning(memory_scopes.c.version)
)


def _by_fact_id(table: sa.Table) -> sa.ColumnElement[bool]:
    return sa.and_(_in_scope(table), table.c.fact_id == sa.bindparam("w_fact_id"))


# The statements of a save's writes, built once with bound parameters, each run on a list of
# rows (executemany): by SQLAlchemy in the transactional path, by the driver in SQLite's.
_CLOSE_FACT = (
    sa.update(memory_facts)
    .where(_by_fact_id(memory_facts), LIVE)
    .values(
        valid_to=sa.bindparam("w_valid_to", type_=UTCDateTime),
        superseded_by=sa.bindparam("w_superseded_by", type_=sa.String),
    )
)
_DROP_CLOSED_ID = sa.delete(memory_facts).where(
    _by_fact_id(memory_facts), memory_facts.c.valid_to.is_not(None)
)
_PURGE_CLOSED = sa.delete(memory_facts).where(
    memory_facts.c.valid_to.is_not(None),
    memory_facts.c.valid_to < sa.bindparam("before", type_=UTCDateTime),
)
_REKEY_FACT = (
    sa.update(memory_facts)
    .where(_by_fact_id(memory_facts))
    .values(content_key=sa.bindparam("w_content_key"))
)


@functools.cache
def _update_fact(columns: tuple[str, ...]) -> sa.Update:
    """The update of a fact's ``columns`` (their values bound as ``w_<column>``), built once
    per set of columns."""
    return (
        sa.update(memory_facts)
        .where(_by_fact_id(memory_facts))
        .values({name: sa.bindparam(f"w_{name}") for name in columns})
    )


_RECORD_ACCESS = (
    sa.update(memory_facts)
    .where(_in_scope(memory_facts), memory_facts.c.fact_id == sa.bindparam("w_fact_id"))
    .values(
        access_count=memory_facts.c.access_count + sa.bindparam("times", type_=sa.Integer),
        last_accessed_at=sa.bindparam("last", type_=UTCDateTime),
    )
)

_ACCESS_HEAT = sa.select(
    memory_facts.c.fact_id, memory_facts.c.access_count, memory_facts.c.last_accessed_at
).where(_in_scope(memory_facts), memory_facts.c.access_count > 0)

# Only the columns a fact row gives (the access heat keeps its server defaults).
_INSERT_FACT = sa.insert(memory_facts).values(
    {
        name: sa.bindparam(name)
        for name in (*_scope_values(Scope.of()), *_fact_columns(Fact(content="x")))
    }
)
_INSERT_EVENT = sa.insert(memory_fact_events)
_DELETE_SECTION = sa.delete(memory_sections).where(
    _in_scope(memory_sections), memory_sections.c.section == sa.bindparam("w_section")
)
_INSERT_SECTION = sa.insert(memory_sections)


def _write_plan(
    scope: Scope, changes: Changes, version: int, now: datetime, make_way: bool = False
) -> list[tuple[sa.Executable, list[dict[str, Any]]]]:
    """The statements that write ``changes`` (making ``version`` at ``now``), in the order they
    must run, each with its rows. Deletes and updates go before inserts, so a fact may take
    over the content of one removed in the same save without tripping the unique constraint;
    facts that trade contents (A takes B's old text while B is reworded) first move their keys
    out of each other's way, the unique key being checked row by row."""
    where = _scope_params(scope)
    plan: list[tuple[sa.Executable, list[dict[str, Any]]]] = []
    if changes.deleted:
        closed = [
            {
                **where,
                "w_fact_id": i,
                "w_valid_to": now,
                "w_superseded_by": changes.superseded.get(i),
            }
            for i in changes.deleted
        ]
        plan.append((_CLOSE_FACT, closed))
    rekeyed = [fact for fact in changes.updated if fact.id in changes.rekeyed]
    if len(rekeyed) > 1:
        keys = [
            {**where, "w_fact_id": f.id, "w_content_key": _placeholder_key(f.id)} for f in rekeyed
        ]
        plan.append((_REKEY_FACT, keys))
    # each fact's changed columns alone; facts changing the same columns in one executemany
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for fact in changes.updated:
        columns = _changed_columns(fact, changes.previous[fact.id])
        row = {**where, "w_fact_id": fact.id}
        row.update({f"w_{n}": v for n, v in _update_values(fact, columns).items()})
        by_columns.setdefault(columns, []).append(row)
    plan.extend((_update_fact(columns), rows) for columns, rows in by_columns.items())
    if make_way:
        # a closed version holding the id of a new fact (an id used again, after a clear, by
        # an import) gives way: its text stays in the events
        reused = [{**where, "w_fact_id": fact.id} for fact in changes.inserted]
        plan.append((_DROP_CLOSED_ID, reused))
    if changes.inserted or changes.archived:
        rows = [_fact_row(scope, fact) for fact in (*changes.inserted, *changes.archived)]
        plan.append((_INSERT_FACT, rows))
    events = _event_rows(scope, changes, version, now)
    if events:
        plan.append((_INSERT_EVENT, events))
    if changes.sections:
        names = [{**where, "w_section": name} for name in changes.sections]
        plan.append((_DELETE_SECTION, names))
        kept = [
            {
                **_scope_values(scope),
                "section": name,
                "summary": s.summary,
                "updated_at": s.updated_at,
            }
            for name, s in changes.sections.items()
            if s.summary or s.updated_at is not None
        ]
        if kept:
            plan.append((_INSERT_SECTION, kept))
    return plan


class SQLStorage(MemoryStorage):
    """:class:`MemoryStorage` on PostgreSQL or SQLite.

    Takes a URL (the engine is created here and disposed by :meth:`close`) or an ``Engine`` the
    caller owns. The schema must be at the migration head (``memory-sql db upgrade``).

    Loaded documents are cached per process (the ``cache_scopes`` most recently used): a load
    costs one primary-key read of the scope row while the memory is unchanged. The cache trusts
    that every write to a scope's rows moves its version forward, as :meth:`save` does; a
    scope deleted and made again is told apart by its creation time. A save locks the scope row
    by moving its version forward (``UPDATE … WHERE version = expected``), so of two racing
    saves exactly one wins and the other raises :class:`VersionConflictError`; then it writes
    only the rows that changed.

    Loads, PostgreSQL's saves and searches run on the driver itself (:mod:`.driver`), which
    keeps up to the engine's pool size of its connections between calls, detached from
    the pool (beyond its limit); ``engine.dispose()`` closes them.
    """

    capabilities = SQL_CAPABILITIES

    def __init__(
        self,
        engine_or_url: Engine | str | URL,
        *,
        cache_scopes: int = DEFAULT_CACHE_SCOPES,
        check_schema: bool = True,
    ) -> None:
        """``check_schema=False`` skips the check that an engine's database is at the schema
        head (a read replica, which may be unreachable when the service starts)."""
        if isinstance(engine_or_url, Engine):
            if check_schema:
                ensure_at_head(engine_or_url)
            self.engine = engine_or_url
            self._owns_engine = False
        else:
            self.engine = open_engine(engine_or_url)
            self._owns_engine = True
        self._dialect = dialect_of(self.engine)
        self._postgres = self._dialect.fast_path == "psycopg"
        self._write_options = self._dialect.write_options
        self._writers = self._dialect.writers(self.engine)
        self._cache = DocumentCache(cache_scopes)
        dialect = self.engine.dialect
        self._head_sql = driver_statement(_SELECT_HEAD, dialect)
        self._document_sql = driver_statement(_SELECT_DOCUMENT, dialect)
        self._times = pg_times if self._postgres else sqlite_times

    def __repr__(self) -> str:
        return f"SQLStorage({redacted(self.engine.url)!r})"

    def close(self) -> None:
        self._cache.clear()
        if self._owns_engine:
            self.engine.dispose()

    # the full-text index ---------------------------------------------------------------------

    def match_facts(
        self, doc: MemoryDocument, scope: Scope, terms: Sequence[str], *, limit: int = 100
    ) -> list[tuple[str, float]]:
        with database_errors(self.engine, f"search the memory {scope}"):
            return match_facts(self.engine, scope, terms, facts=len(doc.facts), limit=limit)

    def record_access(self, counts: Mapping[tuple[Scope, str], tuple[int, datetime]]) -> None:
        by_tenant: dict[str, list[dict[str, Any]]] = {}
        for (scope, fact_id), (times, last) in counts.items():
            row = {**_scope_params(scope), "w_fact_id": fact_id, "times": times, "last": last}
            by_tenant.setdefault(scope.tenant_id, []).append(row)
        with database_errors(self.engine, "record the access heat of facts"):
            for tenant, rows in by_tenant.items():
                with acting_for(tenant), self.engine.begin() as conn:
                    conn.execute(_RECORD_ACCESS, rows)

    def access_heat(self, scope: Scope) -> dict[str, tuple[int, datetime | None]]:
        what = f"read the access heat of {scope}"
        with database_errors(self.engine, what), self.engine.connect() as conn:
            rows = conn.execute(_ACCESS_HEAT, _scope_params(scope))
            return {fact_id: (count, last) for fact_id, count, last in rows}

    # load ------------------------------------------------------------------------------------

    @reconnecting
    def _load(self, scope: Scope) -> MemoryDocument:
        if self._unobserved():
            try:
                return self._load_by_driver(scope, self._cache.latest(scope))
            except DriverFallback:
                pass
            except Exception:  # a connection not to be had is reported now
                with self._errors(scope):
                    raise
        # Autocommit: each read is one round trip, with no BEGIN before it nor ROLLBACK after.
        with self._errors(scope), self._reader() as conn:
            entry = self._cache.latest(scope)
            if entry is not None:  # one primary-key read tells whether it is still current
                head = conn.execute(_SELECT_HEAD, _scope_params(scope)).first()
                if head is not None and (head.version, head.created_at) == entry[0]:
                    return entry[1].clone()
            loaded = _document(conn.execute(_SELECT_DOCUMENT, _scope_params(scope)).all())
        return self._loaded(scope, loaded)

    def load_seen(
        self,
        seen: Seen,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
    ) -> MemoryDocument:
        scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
        if seen.stamp is None:
            return MemoryDocument()
        cached = self._cache.get(scope, seen.stamp)
        if cached is not None:
            return cached.clone()
        return self._load(scope)

    def _loaded(
        self, scope: Scope, loaded: tuple[MemoryDocument, tuple[int, datetime]] | None
    ) -> MemoryDocument:
        """The caller's copy of a document just read, which the cache now holds."""
        if loaded is None:
            self._cache.drop(scope)
            return MemoryDocument()
        doc, stamp = loaded
        self._cache.put(scope, stamp, doc)
        return doc.clone()

    @reconnecting
    def _load_as_of(self, scope: Scope, as_of: datetime) -> MemoryDocument:
        params = {**_scope_params(scope), "as_of": as_of}
        with self._errors(scope), self._reader() as conn:
            head = conn.execute(_SELECT_HEAD, params).first()
            if head is None:
                return MemoryDocument()
            facts = [trusted_fact(*row) for row in conn.execute(_SELECT_FACTS_AS_OF, params)]
            sections = conn.execute(_SELECT_SECTIONS, params).all()
        doc = MemoryDocument(facts=sort_facts(facts), last_updated=head.updated_at)
        for name, summary, updated_at in sections:
            group = doc.user if hasattr(doc.user, name) else doc.history
            setattr(group, name, Section(summary=summary, updated_at=updated_at))
        return doc

    def purge_closed(self, older_than: datetime, *, tenant_id: str | None = None) -> int:
        statement = _PURGE_CLOSED
        if tenant_id is not None:
            statement = statement.where(memory_facts.c.tenant_id == tenant_id)
        with database_errors(self.engine, "purge closed facts"):
            if tenant_id is None:
                with self.engine.begin() as conn:
                    return conn.execute(statement, {"before": older_than}).rowcount
            with acting_for(tenant_id), self.engine.begin() as conn:
                return conn.execute(statement, {"before": older_than}).rowcount

    def _load_by_driver(
        self, scope: Scope, entry: tuple[Any, MemoryDocument] | None
    ) -> MemoryDocument:
        """:meth:`_load` through the driver itself, the same statements without SQLAlchemy's
        per-call work (which is most of a cached load's time). Raises :class:`DriverFallback` on
        any error, having changed nothing: SQLAlchemy's path then reads, and reports."""
        with self._driver() as dbapi:
            # one primary-key read tells whether the cached document is still current
            if entry is not None and self._stored_stamp(dbapi, scope) == entry[0]:
                return entry[1].clone()
            sql, fixed = self._document_sql
            rows = dbapi.execute(sql, {**fixed, **_scope_params(scope)}).fetchall()
            # UTC sessions (memory_sql's engines set it) give UTC datetimes as they are;
            # another zone's need converting, as SQLite's text always does.
            utc = self._postgres and dbapi.info.timezone is timezone.utc
        try:
            loaded = _document(rows, None if utc else self._times)
        except (ValueError, TypeError, AttributeError, IndexError) as exc:
            raise DriverFallback from exc
        return self._loaded(scope, loaded)

    def _stored_stamp(self, dbapi: Any, scope: Scope) -> tuple[int, datetime] | None:
        """The cache stamp (version, creation time) of the stored memory, read on the driver
        connection ``dbapi``; None when nothing is stored. :class:`DriverFallback` on a row
        it cannot read."""
        sql, fixed = self._head_sql
        heads = dbapi.execute(sql, {**fixed, **_scope_params(scope)}).fetchall()
        if not heads:
            return None
        try:
            return heads[0][0], cast(datetime, self._times(heads[0][1:2])[0])
        except (ValueError, TypeError, AttributeError) as exc:
            raise DriverFallback from exc

    def _read_rows(
        self, conn: Connection, scope: Scope, version: int, last_updated: Any
    ) -> MemoryDocument:
        """The scope's document as this transaction sees it (``version`` given by the
        caller, which holds the scope row)."""
        loaded = _document(conn.execute(_SELECT_DOCUMENT, _scope_params(scope)).all())
        doc = loaded[0] if loaded is not None else MemoryDocument()
        doc.version, doc.last_updated = version, last_updated
        return doc

    # save ------------------------------------------------------------------------------------

    def save(
        self,
        doc: MemoryDocument,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        expected_version: int | None = None,
        in_transaction: Callable[[Connection], object] | WithTheSave | None = None,
    ) -> int:
        """:meth:`MemoryStorage.save`, and ``in_transaction``: when the save writes, it is
        called with the save's connection after the rows are written and before the commit,
        so what it writes commits with the save, and an exception it raises rolls the whole
        save back (and is raised). It is not called when nothing changed. A
        :class:`~.with_save.WithTheSave` may instead go into PostgreSQL's one statement."""
        # A fact id given twice makes the save insert an id the table holds (or inserts twice):
        # its primary key refuses it, and _errors names the id. Not counted here at each save.
        scope, expected = _checked_save(
            doc, user_id, agent_name, tenant_id, expected_version, fact_ids=False
        )
        return self._save(scope, doc, expected, with_the_save(in_transaction))

    def _save(
        self,
        scope: Scope,
        doc: MemoryDocument,
        expected_version: int,
        with_save: WithTheSave | None = None,
    ) -> int:
        now = utcnow()
        if (with_save is None and self._unobserved()) or (
            self._postgres and (with_save is None or with_save.in_one_statement)
        ):
            saved = self._save_from_cache(scope, doc, expected_version, now, with_save)
            if saved is not None:
                if with_save is not None:
                    with_save.committed()
                return saved
        make_way = False
        while True:
            try:
                with self._write_transaction(scope, doc) as conn:
                    created_at, base = self._claim(conn, scope, expected_version, now)
                    changes = diff_documents(base, doc, now, self.guard, scope)
                    if not changes:
                        conn.rollback()
                        return expected_version
                    new_version = expected_version + 1
                    try:
                        self._write(conn, scope, changes, new_version, now, make_way)
                    except Exception as exc:
                        if make_way or not changes.inserted or not _id_taken(exc):
                            raise
                        raise _IdTaken from exc  # rolled back; again, making way
                    if changes.redactions:
                        record_redactions(conn, scope.tenant_id, "write", changes.redactions)
                    if with_save is not None:
                        with_save.write_on(conn)
            except _IdTaken:
                make_way = True
                continue
            break
        stored = apply_changes(base, changes, new_version, now)
        self._cache.put(scope, (new_version, created_at), stored)
        if with_save is not None:
            with_save.committed()
        if changes.redactions and self.guard is not None:
            self.guard.saved(scope, changes.redactions)
        return new_version

    def _save_from_cache(
        self,
        scope: Scope,
        doc: MemoryDocument,
        expected_version: int,
        now: datetime,
        with_save: WithTheSave | None = None,
    ) -> int | None:
        """A save from the stored document at ``expected_version`` the cache holds (its
        creation time goes into the version check, so a scope deleted and made again never
        matches), its writes in one round trip on PostgreSQL, in one short transaction on
        SQLite. Returns None, having written nothing, when the cache lacks the document, the
        check fails or the change needs ordered writes on PostgreSQL: :meth:`_save` then takes
        the transactional path, which reads the base in its transaction and tells a real
        conflict from a stale cache entry. ``with_save`` (its one-statement form) goes into
        PostgreSQL's statement; a change of nothing is left to the transactional path with
        it, which writes nothing (and calls nothing)."""
        cached = self._cached_base(scope, expected_version, now)
        if cached is None:
            return None
        created_at, base = cached
        changes = diff_documents(base, doc, now, self.guard, scope)
        if changes.redactions:  # counted in the save's transaction: the transactional path
            return None
        if not changes:  # nothing to write, if the memory is still at that version
            if with_save is not None:
                return None
            return expected_version if self._still_at(scope, expected_version, created_at) else None
        new_version = expected_version + 1
        try:
            if self._postgres:
                written = self._write_in_one_statement(
                    scope, changes, expected_version, created_at, now, with_save
                )
            else:
                written = self._write_by_driver_on_sqlite(
                    scope, changes, expected_version, created_at, now
                )
        except Exception as exc:  # as memory_sql's errors (no context manager on the way in)
            if changes.inserted and _id_taken(exc):
                # An id a closed version holds, given to a new fact: the transactional path
                # (the one statement wrote nothing) makes way for it.
                return None
            with self._errors(scope, doc):
                raise
        if not written:
            return None
        stored = apply_changes(base, changes, new_version, now)
        self._cache.put(scope, (new_version, created_at), stored)
        return new_version

    def _write_in_one_statement(
        self,
        scope: Scope,
        changes: Changes,
        expected_version: int,
        created_at: datetime,
        now: datetime,
        with_save: WithTheSave | None = None,
    ) -> bool:
        """PostgreSQL: the save as one statement (data-modifying CTEs, every write gated on the
        version check), in autocommit: one round trip, atomic as any statement is. False,
        having written nothing, when the check fails (or a part ``with_save`` requires finds
        no row) or the change needs ordered writes (facts trading keys, a key freed and taken
        in one save)."""
        if not _writable_at_once(changes):
            return False
        parameters, writes = _one_statement_parameters(
            scope, changes, expected_version, created_at, now
        )
        requires: tuple[tuple[str, str], ...] = ()
        companions: tuple[str, ...] = ()
        if with_save is not None:
            assert with_save.ctes is not None
            requires, companions = with_save.requires, with_save.ctes
            parameters.update(with_save.parameters)
        statement = _one_statement_sql(expected_version == 0, writes, requires, companions)
        if self._unobserved():
            with self._driver(raising=True) as dbapi:
                won = dbapi.execute(statement, parameters).fetchall()
        else:
            with self._reader() as conn:
                won = conn.exec_driver_sql(statement, parameters).all()
        if not won and with_save is None:  # another version or incarnation: nothing written
            self._cache.drop(scope)
        return bool(won)

    def _write_by_driver_on_sqlite(
        self,
        scope: Scope,
        changes: Changes,
        expected_version: int,
        created_at: datetime,
        now: datetime,
    ) -> bool:
        """SQLite: the save's transaction on the driver itself (``BEGIN IMMEDIATE``, the version
        claimed, the rows of :func:`_write_plan`, ``COMMIT``). False, having written nothing,
        when the claim fails (another version, or the scope made again)."""
        dialect = self.engine.dialect
        claim = _CLAIM_NEW_SCOPE if expected_version == 0 else _CLAIM_VERSION
        where = {**_scope_params(scope), "now": now}
        where.update(expected=expected_version, created_at=created_at)
        with self._driver(raising=True) as dbapi, self._writers:
            dbapi.execute(self._dialect.begin_write)
            try:
                if not driver_write(claim, dialect).run(dbapi, [where]).fetchall():
                    dbapi.execute("ROLLBACK")
                    return False
                for statement, rows in _write_plan(scope, changes, expected_version + 1, now):
                    driver_write(statement, dialect).run(dbapi, rows)
                dbapi.execute("COMMIT")
            except BaseException:
                with suppress(Exception):
                    dbapi.execute("ROLLBACK")
                raise
        return True

    def _cached_base(
        self, scope: Scope, expected_version: int, now: datetime
    ) -> tuple[datetime, MemoryDocument] | None:
        """The scope's creation time and its document as stored at ``expected_version``, from
        the cache (at version 0: a memory made ``now``); None when the cache lacks it."""
        if expected_version == 0:
            return now, MemoryDocument()
        entry = self._cache.latest(scope)
        if entry is None:
            return None
        stamp, base = entry
        version, created_at = cast(tuple[int, datetime], stamp)  # this store's stamps
        if version != expected_version:
            return None
        return created_at, base

    def _still_at(self, scope: Scope, expected_version: int, created_at: datetime) -> bool:
        """Whether the stored memory is at ``expected_version`` (past 0, the incarnation created
        at ``created_at``), by one primary-key read; False when the driver cannot tell (the
        transactional path then does, and reports)."""
        if not self._unobserved():
            return False
        try:
            with self._driver() as dbapi:
                stamp = self._stored_stamp(dbapi, scope)
        except Exception:
            return False
        return stamp == (None if expected_version == 0 else (expected_version, created_at))

    def _claim(
        self, conn: Connection, scope: Scope, expected_version: int, now: datetime
    ) -> tuple[datetime, MemoryDocument]:
        """Move the scope's version past ``expected_version`` (locking the row until commit).

        Returns the scope's creation time and its document as stored at ``expected_version``.
        """
        if expected_version == 0:
            insert = _insert_new_scope(self._dialect)
            if conn.execute(insert, {**_scope_params(scope), "now": now}).first() is None:
                self._conflict(conn, scope, expected_version)
            return now, MemoryDocument()
        created_at = conn.execute(
            _BUMP_VERSION, {**_scope_params(scope), "expected": expected_version, "now": now}
        ).scalar()
        if created_at is None:
            self._conflict(conn, scope, expected_version)
        cached = self._cache.get(scope, (expected_version, created_at))
        if cached is not None:
            return created_at, cached
        return created_at, self._read_rows(conn, scope, expected_version, None)

    def _conflict(self, conn: Connection, scope: Scope, expected_version: int) -> NoReturn:
        actual = conn.execute(_SELECT_HEAD, _scope_params(scope)).scalar()
        raise VersionConflictError(str(scope), expected_version, actual)

    def _write(
        self,
        conn: Connection,
        scope: Scope,
        changes: Changes,
        version: int,
        now: datetime,
        make_way: bool = False,
    ) -> None:
        for statement, rows in _write_plan(scope, changes, version, now, make_way):
            conn.execute(statement, rows)

    # cache and errors ------------------------------------------------------------------------

    def _unobserved(self) -> bool:
        return unobserved(self.engine)

    def _driver(self, *, raising: bool = False) -> Any:
        return DriverConnection(self.engine, raising=raising)

    def _reader(self) -> Connection:
        return self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _write_transaction(self, scope: Scope, doc: MemoryDocument) -> Iterator[Connection]:
        """A write transaction (holding SQLite's write lock from its start) saving ``doc``."""
        with self._errors(scope, doc), self._writers:
            connection = self.engine.connect().execution_options(**self._write_options)
            with connection as conn, conn.begin():
                yield conn

    @contextmanager
    def _errors(self, scope: Scope, doc: MemoryDocument | None = None) -> Iterator[None]:
        """Database errors of one scope become memory_sql errors (a casefold duplicate, a
        refused save, an invalid row; anything else through :func:`database_errors`)."""
        try:
            with database_errors(self.engine, f"memory {scope}"):
                try:
                    yield
                except Exception as exc:
                    if not is_refusal(exc):
                        raise
                    if doc is not None:
                        check_fact_ids(scope, doc)
                    if not is_refusal(exc, _LIVE_CONTENT_KEY):
                        raise
                    duplicate = doc.duplicate_fact() if doc is not None else None
                    content = duplicate.content if duplicate is not None else None
                    raise DuplicateFactError(str(scope), content) from exc
        except ValidationError as exc:
            raise StorageError(f"memory {scope}: a stored row is invalid: {exc}") from exc
