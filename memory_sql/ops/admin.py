"""Operations across memories: forget a user, search facts, export and import memories.

The functions taking an ``Engine`` work on a SQL database at the schema head (they read and
write several scopes); those taking a :class:`~memory_sql.MemoryStorage` work on one scope of any
backend, through ``load`` and ``save`` with ``expected_version``, retrying on a version conflict.

Export and import speak DeerFlow's ``memory.json`` shape (:meth:`MemoryDocument.to_deerflow`):
one document for one memory, or JSON Lines for many, one memory a line::

    {"tenant_id": "default", "user_id": "u1", "agent_name": "coder", "memory": {…memory.json…}}

An import replaces the memory's sections and facts with the file's (facts keep their ids and
creation times; a fact with a new id whose content, casefolded, is already stored takes the
stored fact's id) and is idempotent: importing the same file again changes nothing and leaves
every version as it was. The whole input is parsed and validated before anything is written;
a malformed line raises :class:`ImportFileError` naming it. The database stamps what it writes
(the memory's ``revision`` and ``lastUpdated``, each stored fact's ``updatedAt``), so these
fields of an export are the database's, not the imported file's.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..errors import (
    DuplicateFactError,
    FactNotFoundError,
    ImportFileError,
    VersionConflictError,
)
from ..models import (
    CATEGORY_PATTERN,
    Fact,
    MemoryDocument,
    fact_key,
    format_timestamp,
    trusted_fact,
)
from ..schema import (
    FACT_COLUMNS,
    memory_fact_events,
    memory_facts,
    memory_pending_updates,
    memory_scopes,
    memory_sections,
)
from ..scope import Scope
from ..storage import MemoryStorage, SQLStorage
from ..storage.driver import read_facts_by_driver

SAVE_ATTEMPTS = 5
"""How many times a read-modify-save is tried before a version conflict is raised."""


# forget ----------------------------------------------------------------------------------------

# Children before parents, so nothing depends on ON DELETE CASCADE (or on SQLite's foreign_keys
# pragma) and each count is what that statement deleted.
_FORGET_ORDER = (
    memory_facts,
    memory_sections,
    memory_fact_events,
    memory_pending_updates,
    memory_scopes,
)
_FORGET = {
    table.name: sa.delete(table).where(
        table.c.tenant_id == sa.bindparam("tenant"), table.c.user_id == sa.bindparam("user")
    )
    for table in _FORGET_ORDER
}
_REPORTED_ORDER = (
    "memory_scopes",
    "memory_sections",
    "memory_facts",
    "memory_pending_updates",
    "memory_fact_events",
)


def memory_exists(
    engine: Engine, user_id: str, *, agent_name: str | None = None, tenant_id: str | None = None
) -> bool:
    """Whether ``user_id`` of ``tenant_id`` has a stored memory (of ``agent_name``; of any
    agent when None).

    Raises:
        InvalidScopeError: a name is malformed.
        StorageError: the database failed.
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    conditions = [
        memory_scopes.c.tenant_id == scope.tenant_id,
        memory_scopes.c.user_id == scope.user_id,
    ]
    if agent_name is not None:
        conditions.append(memory_scopes.c.agent_name == scope.agent_key)
    statement = sa.select(sa.literal(1)).where(*conditions).limit(1)
    with database_errors(engine, f"read the memories of {scope}"), engine.connect() as conn:
        return conn.execute(statement).first() is not None


def forget_user(engine: Engine, user_id: str, *, tenant_id: str = "default") -> dict[str, int]:
    """Delete every row of ``user_id`` in ``tenant_id`` — all memories (any agent), their
    sections and facts, waiting updates and the fact history — in one transaction.

    Returns the rows deleted per table (``memory_scopes``, ``memory_sections``,
    ``memory_facts``, ``memory_pending_updates``, ``memory_fact_events``). An update already
    running for the user in a worker may still save a memory after this returns: stop the
    workers first, or forget again.

    Raises:
        InvalidScopeError: ``user_id`` or ``tenant_id`` is malformed.
        StorageError: the database failed; nothing was deleted.
    """
    scope = Scope.of(user_id=user_id, tenant_id=tenant_id)
    params = {"tenant": scope.tenant_id, "user": scope.user_id}
    deleted: dict[str, int] = {}
    what = f"forget {scope.tenant_id}/{scope.user_id}"
    with database_errors(engine, what), _write(engine) as conn:
        for table in _FORGET_ORDER:
            deleted[table.name] = conn.execute(_FORGET[table.name], params).rowcount
    return {name: deleted[name] for name in _REPORTED_ORDER}


# search ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactRecord:
    """A fact with the memory it belongs to (``agent_name`` None: the unnamed agents')."""

    tenant_id: str
    user_id: str
    agent_name: str | None
    fact: Fact

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the scope, then the fact's fields (timestamps as DeerFlow writes them)."""
        fact = self.fact
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "agent_name": self.agent_name,
            "id": fact.id,
            "content": fact.content,
            "category": fact.category,
            "confidence": fact.confidence,
            "source_thread_id": fact.source_thread_id,
            "source_error": fact.source_error,
            "created_at": format_timestamp(fact.created_at),
            "updated_at": format_timestamp(fact.updated_at),
        }


_SEARCH = sa.select(
    memory_facts.c.tenant_id, memory_facts.c.user_id, memory_facts.c.agent_name, *FACT_COLUMNS
).order_by(
    memory_facts.c.confidence.desc(),
    memory_facts.c.tenant_id,
    memory_facts.c.user_id,
    memory_facts.c.agent_name,
    memory_facts.c.created_at,
    memory_facts.c.fact_id,
)


def search_facts(
    engine: Engine,
    text: str | None = None,
    *,
    category: str | None = None,
    min_confidence: float | None = None,
    tenant_id: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    limit: int | None = 50,
) -> list[FactRecord]:
    """Facts of every memory matching all the filters given, highest confidence first.

    ``text`` matches a fact whose content contains it after both are casefolded the way
    duplicates are detected (:func:`memory_sql.fact_key`: NFKC, ``str.casefold()``,
    whitespace folded): ``"STRASSE"`` finds ``"Straße"``, ``"python"`` finds ``"ＰＹＴＨＯＮ"``,
    and CJK text matches as written. The other filters run in the database; the text is
    compared in Python on the rows they leave, so the result is the same on SQLite (whose
    ``lower()`` and ``LIKE`` fold ASCII only) and PostgreSQL. ``agent_name=""`` selects the
    unnamed agents' memories; ``limit=None`` returns every match.

    Raises:
        InvalidScopeError: a tenant, user or agent filter is malformed.
        ValueError: ``min_confidence`` outside [0, 1], ``limit`` below 1, a bad category.
        StorageError: the database failed.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
        raise ValueError(f"min_confidence must be between 0 and 1, not {min_confidence}")
    checked = Scope.of(user_id=user_id, agent_name=agent_name or None, tenant_id=tenant_id)
    parameters: dict[str, Any] = {}
    if tenant_id is not None:
        parameters["tenant"] = checked.tenant_id
    if user_id is not None:
        parameters["user"] = checked.user_id
    if agent_name is not None:
        parameters["agent"] = checked.agent_key
    if category is not None:
        category = category.strip().lower()
        if not CATEGORY_PATTERN.fullmatch(category):
            raise ValueError(f"category {category!r} must match ^[a-z0-9_-]{{1,32}}$")
        parameters["category"] = category
    if min_confidence is not None:
        parameters["min_confidence"] = min_confidence
    needle = fact_key(text) if text is not None else ""
    if not needle and limit is not None:
        parameters["limit"] = limit
    statement = _search_statement(frozenset(parameters))
    found: list[FactRecord] = []
    with database_errors(engine, "search facts"):
        if not needle:  # the database does all the filtering: one autocommit round trip
            rows = read_facts_by_driver(engine, statement, parameters, scoped=3)
            if rows is not None:
                return [FactRecord(t, u, a or None, fact) for (t, u, a), fact in rows]
        with engine.connect() as conn:
            if not needle:
                autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
                return [_record(row) for row in autocommit.execute(statement, parameters).all()]
            # The text is matched here, row by row: stream them rather than read them all.
            rows = conn.execution_options(yield_per=500).execute(statement, parameters)
            for row in rows:
                if needle not in fact_key(row.content):
                    continue
                found.append(_record(row))
                if limit is not None and len(found) >= limit:
                    break
            rows.close()
    return found


@functools.lru_cache(maxsize=64)
def _search_statement(filters: frozenset[str]) -> sa.Select:
    """:data:`_SEARCH` with the ``filters`` given (names of their bound parameters), built
    once per combination: SQLAlchemy's construction and cache key are not redone per call,
    and the driver's text of it is compiled once."""
    statement = _SEARCH
    for name, condition in _SEARCH_FILTERS.items():
        if name in filters:
            statement = statement.where(condition)
    if "limit" in filters:
        statement = statement.limit(sa.bindparam("limit", type_=sa.Integer))
    return statement


_SEARCH_FILTERS = {
    "tenant": memory_facts.c.tenant_id == sa.bindparam("tenant"),
    "user": memory_facts.c.user_id == sa.bindparam("user"),
    "agent": memory_facts.c.agent_name == sa.bindparam("agent"),
    "category": memory_facts.c.category == sa.bindparam("category"),
    "min_confidence": memory_facts.c.confidence >= sa.bindparam("min_confidence"),
}


def _record(row: Any) -> FactRecord:
    tenant_id, user_id, agent_name, *fact = row
    return FactRecord(tenant_id, user_id, agent_name or None, trusted_fact(*fact))


# facts of one memory ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FactChange:
    """A fact as a change left it, and the memory's version after the change."""

    fact: Fact
    version: int


def add_fact(
    storage: MemoryStorage,
    content: str,
    *,
    category: str = "context",
    confidence: float = 0.9,
    source_thread_id: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    expected_version: int | None = None,
) -> FactChange:
    """Add one fact to a memory; returns it as built (with its new id) and the version saved.

    Raises:
        DuplicateFactError: the memory has a fact with the same casefold key.
        ValueError: the content, category or confidence is invalid (one line, naming it).
        InvalidScopeError, StorageError, VersionConflictError (see :func:`update_fact`).
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    try:
        fact = Fact(
            content=content,
            category=category,
            confidence=confidence,
            source_thread_id=source_thread_id,
        )
    except ValidationError as exc:
        raise ValueError(f"invalid fact: {describe_validation_error(exc)}") from None

    def change(doc: MemoryDocument) -> None:
        if any(existing.key == fact.key for existing in doc.facts):
            raise DuplicateFactError(str(scope), fact.content)
        doc.facts.append(fact)

    version = _modify(storage, scope, change, expected_version)
    return FactChange(_as_stored(storage, scope, fact), version)


def update_fact(
    storage: MemoryStorage,
    fact_id: str,
    *,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    expected_version: int | None = None,
    **changes: Any,
) -> FactChange:
    """Change fields of the fact ``fact_id`` (``content``, ``category``, ``confidence``,
    ``source_thread_id``, ``source_error``); returns the fact as stored and the version saved.

    Without ``expected_version`` a save that loses to another writer is retried on the
    memory as it now is; with it, the memory must still be at that version (else
    :class:`VersionConflictError`, nothing changed).

    Raises:
        FactNotFoundError: the memory has no such fact.
        DuplicateFactError: the new content is another fact's (casefold).
        ValueError: a field is unknown or its value invalid (one line, naming it).
        InvalidScopeError, StorageError, VersionConflictError.
    """
    unknown = set(changes) - _EDITABLE
    if unknown:
        raise ValueError(f"facts have no editable field {', '.join(sorted(unknown))}")
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    changed: list[Fact] = []

    def change(doc: MemoryDocument) -> None:
        for index, existing in enumerate(doc.facts):
            if existing.id == fact_id:
                try:
                    fact = existing.replace(**changes)
                except ValidationError as exc:
                    raise ValueError(f"invalid fact: {describe_validation_error(exc)}") from None
                doc.facts[index] = fact
                changed[:] = [fact]
                return
        raise FactNotFoundError(str(scope), fact_id)

    version = _modify(storage, scope, change, expected_version)
    return FactChange(_as_stored(storage, scope, changed[0]), version)


def _as_stored(storage: MemoryStorage, scope: Scope, fact: Fact) -> Fact:
    """``fact`` as its save stored it (with the ``updated_at`` the save gave it): one load,
    from the cache after the save; ``fact`` itself if another writer removed it since."""
    doc = storage.load(**scope.arguments())
    return next((stored for stored in doc.facts if stored.id == fact.id), fact)


_EDITABLE = frozenset({"content", "category", "confidence", "source_thread_id", "source_error"})


def remove_fact(
    storage: MemoryStorage,
    fact_id: str,
    *,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    expected_version: int | None = None,
) -> FactChange:
    """Remove the fact ``fact_id`` from a memory; returns it and the version saved.

    Raises:
        FactNotFoundError: the memory has no such fact.
        InvalidScopeError, StorageError, VersionConflictError (see :func:`update_fact`).
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    removed: list[Fact] = []

    def change(doc: MemoryDocument) -> None:
        kept = [f for f in doc.facts if f.id != fact_id]
        if len(kept) == len(doc.facts):
            raise FactNotFoundError(str(scope), fact_id)
        removed[:] = [f for f in doc.facts if f.id == fact_id]
        doc.facts = kept

    version = _modify(storage, scope, change, expected_version)
    return FactChange(removed[0], version)


# export and import -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopedMemory:
    """One memory read from an import file: its scope, document and line (1-based)."""

    scope: Scope
    memory: MemoryDocument
    line: int


@dataclass(frozen=True)
class ImportResult:
    """What an import did: memories in the file, and how many of them changed (were saved)."""

    memories: int
    changed: int

    @property
    def unchanged(self) -> int:
        return self.memories - self.changed


def export_memory(
    storage: MemoryStorage,
    *,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
) -> dict[str, Any]:
    """One memory in DeerFlow's ``memory.json`` shape (an empty one, revision 0, if none)."""
    return storage.load(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id).to_deerflow()


def import_memory(
    storage: MemoryStorage,
    data: dict[str, Any] | str | bytes,
    *,
    user_id: str | None = None,
    agent_name: str | None = None,
    tenant_id: str | None = None,
    source: str = "memory.json",
    expected_version: int | None = None,
) -> tuple[int, int]:
    """Make one memory hold what ``data`` (DeerFlow's ``memory.json``, parsed or as text) holds.

    Returns the memory's version before and after; they are equal when nothing changed.

    Raises:
        ImportFileError: ``data`` is not a valid memory.json (naming ``source`` and, for bad
            JSON, the line); nothing was written.
        InvalidScopeError, StorageError, VersionConflictError (see :func:`update_fact`).
    """
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ImportFileError(source, exc.lineno, f"not JSON: {exc.msg}") from None
        except UnicodeDecodeError as exc:
            raise ImportFileError(source, None, f"not UTF-8 text: {exc.reason}") from None
    memory = parse_memory(data, source=source, line=None)
    return _replace(storage, scope, memory, expected_version)


def parse_memory(
    data: object, *, source: str = "<input>", line: int | None = None
) -> MemoryDocument:
    """``data`` (DeerFlow's ``memory.json`` as parsed JSON) as a validated document.

    Raises:
        ImportFileError: not an object of that shape, a fact id twice, or two facts that are
            duplicates (casefold).
    """
    if not isinstance(data, dict):
        raise ImportFileError(source, line, f"a memory must be a JSON object, not {_kind(data)}")
    try:
        memory = MemoryDocument.from_deerflow(data)
    except ValidationError as exc:
        raise ImportFileError(source, line, describe_validation_error(exc)) from None
    seen: set[str] = set()
    for fact in memory.facts:
        if fact.id in seen:
            raise ImportFileError(source, line, f"fact id {fact.id!r} appears twice")
        seen.add(fact.id)
    duplicate = memory.duplicate_fact()
    if duplicate is not None:
        raise ImportFileError(
            source, line, f"fact {duplicate.content[:80]!r} duplicates another (casefold match)"
        )
    return memory


_LINE_KEYS = frozenset({"tenant_id", "user_id", "agent_name", "memory"})


def read_jsonl(
    content: bytes | str, *, source: str = "<input>", tenant_id: str | None = None
) -> list[ScopedMemory]:
    """Parse and validate a whole JSON Lines export; blank lines are skipped. A line without
    ``tenant_id`` is of ``tenant_id`` (default ``"default"``).

    Raises:
        ImportFileError: the first malformed line (bad JSON or UTF-8, a missing or unknown key,
            an invalid scope, an invalid memory, a scope already given on an earlier line).
    """
    lines = content.split(b"\n" if isinstance(content, bytes) else "\n")
    memories: list[ScopedMemory] = []
    first_line: dict[Scope, int] = {}
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportFileError(source, number, f"not UTF-8 text: {exc.reason}") from None
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            problem = f"not JSON: {exc.msg} (column {exc.colno})"
            raise ImportFileError(source, number, problem) from None
        if not isinstance(data, dict):
            raise ImportFileError(source, number, f"expected a JSON object, not {_kind(data)}")
        unknown = sorted(set(data) - _LINE_KEYS)
        if unknown:
            allowed = ", ".join(sorted(_LINE_KEYS))
            raise ImportFileError(
                source, number, f"unknown key {unknown[0]!r} (allowed: {allowed})"
            )
        for key in ("user_id", "memory"):
            if key not in data:
                raise ImportFileError(source, number, f"missing {key!r}")
        try:
            scope = Scope.of(
                user_id=data["user_id"],
                agent_name=data.get("agent_name"),
                tenant_id=data.get("tenant_id", tenant_id),
            )
        except ValueError as exc:
            raise ImportFileError(source, number, str(exc)) from None
        if scope in first_line:
            problem = f"memory {scope} is already on line {first_line[scope]}"
            raise ImportFileError(source, number, problem)
        first_line[scope] = number
        memory = parse_memory(data["memory"], source=source, line=number)
        memories.append(ScopedMemory(scope, memory, number))
    return memories


def import_jsonl(engine: Engine, content: bytes | str, *, source: str = "<input>") -> ImportResult:
    """Import a JSON Lines export (see :func:`read_jsonl`) into the database.

    Every line is validated before the first memory is written. Each memory is then saved in a
    transaction of its own; should the import stop half-way (a database failure), running it
    again completes it, since memories already imported are left as they are.

    Raises:
        ImportFileError: a malformed line; nothing was written.
        StorageError, VersionConflictError (after retrying).
    """
    memories = read_jsonl(content, source=source)
    with SQLStorage(engine, cache_scopes=0) as storage:
        return import_scoped(storage, memories)


def import_scoped(storage: MemoryStorage, memories: list[ScopedMemory]) -> ImportResult:
    """Make each memory of ``memories`` (from :func:`read_jsonl`) hold what it holds, each
    saved on its own (see :func:`import_jsonl`)."""
    changed = 0
    for item in memories:
        before, after = _replace(storage, item.scope, item.memory)
        changed += before != after
    return ImportResult(memories=len(memories), changed=changed)


_SCOPE_KEYS = sa.select(
    memory_scopes.c.tenant_id, memory_scopes.c.user_id, memory_scopes.c.agent_name
).order_by(memory_scopes.c.tenant_id, memory_scopes.c.user_id, memory_scopes.c.agent_name)


def export_jsonl(engine: Engine, out: IO[str], *, tenant_id: str | None = None) -> int:
    """Write every memory of ``tenant_id`` (None: of the whole database) to ``out`` as JSON
    Lines (:func:`iter_jsonl`), and return how many were written."""
    written = 0
    for line in iter_jsonl(engine, tenant_id=tenant_id):
        out.write(line + "\n")
        written += 1
    return written


def iter_jsonl(engine: Engine, *, tenant_id: str | None = None) -> Iterator[str]:
    """Every memory of ``tenant_id`` (None: of the whole database) as a JSON Lines line
    (without its newline), ordered by tenant, user and agent, read one at a time.

    Each memory is read consistently on its own; memories saved while the export runs may be
    exported before or after the change.
    """
    statement = _SCOPE_KEYS
    if tenant_id is not None:
        tenant = Scope.of(tenant_id=tenant_id).tenant_id
        statement = statement.where(memory_scopes.c.tenant_id == tenant)
    with database_errors(engine, "export"), engine.connect() as conn:
        keys = conn.execute(statement).all()
    with SQLStorage(engine, cache_scopes=0) as storage:
        for tenant, user, agent in keys:
            doc = storage.load(user_id=user, agent_name=agent or None, tenant_id=tenant)
            if doc.version == 0:  # forgotten since the keys were read
                continue
            line = {
                "tenant_id": tenant,
                "user_id": user,
                "agent_name": agent or None,
                "memory": doc.to_deerflow(),
            }
            yield json.dumps(line, ensure_ascii=False)


# helpers ---------------------------------------------------------------------------------------


def describe_validation_error(exc: ValidationError) -> str:
    """A pydantic error as one line: ``facts[0].confidence: Input should be a valid number``."""
    parts = []
    for error in exc.errors():
        where = ""
        for item in error["loc"]:
            where += f"[{item}]" if isinstance(item, int) else (f".{item}" if where else str(item))
        message = error["msg"].removeprefix("Value error, ")
        if error.get("input") is not None and error["type"] not in ("missing", "dict_type"):
            message += f" (got {str(error['input'])[:40]!r})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _modify(
    storage: MemoryStorage,
    scope: Scope,
    change: Callable[[MemoryDocument], Any],
    expected_version: int | None = None,
) -> int:
    """Load, ``change`` in place, save with the version loaded; retried on a version conflict,
    unless ``expected_version`` is given: then the memory must be at it, and a conflict is
    raised at once. Returns the version saved (the one loaded when nothing changed)."""
    kwargs = {
        "user_id": scope.user_id,
        "agent_name": scope.agent_name,
        "tenant_id": scope.tenant_id,
    }
    attempts = SAVE_ATTEMPTS if expected_version is None else 1
    for attempt in range(1, attempts + 1):
        doc = storage.load(**kwargs)
        if expected_version is not None and doc.version != expected_version:
            raise VersionConflictError(str(scope), expected_version, doc.version)
        change(doc)
        try:
            return storage.save(doc, **kwargs, expected_version=doc.version)
        except VersionConflictError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _replace(
    storage: MemoryStorage,
    scope: Scope,
    memory: MemoryDocument,
    expected_version: int | None = None,
) -> tuple[int, int]:
    """Make ``scope`` hold ``memory``'s sections and facts; (version before, version after)."""
    before: list[int] = []

    def change(doc: MemoryDocument) -> None:
        before[:] = [doc.version]
        current = doc.sections()
        for name, section in memory.sections().items():
            # A section without a timestamp that says what is stored already is unchanged:
            # taking it would only move the stored timestamp, and a second import would too.
            if section.updated_at is None and section.summary == current[name].summary:
                continue
            group = doc.user if hasattr(doc.user, name) else doc.history
            setattr(group, name, section.model_copy())
        doc.facts = _match_stored_ids(memory.facts, doc.facts)

    after = _modify(storage, scope, change, expected_version)
    return before[0], after


def _match_stored_ids(incoming: list[Fact], stored: list[Fact]) -> list[Fact]:
    """``incoming`` with each fact whose id is new but whose content (casefold) is stored
    taking the stored fact's id: a file without ids, or with ids of its own, then imports
    again as a no-op instead of replacing every fact by an equal one."""
    stored_ids = {fact.id for fact in stored}
    incoming_ids = {fact.id for fact in incoming}
    stored_by_key = {fact.key: fact for fact in stored}
    matched = []
    for fact in incoming:
        twin = None if fact.id in stored_ids else stored_by_key.get(fact.key)
        if twin is not None and twin.id not in incoming_ids:
            fact = fact.replace(id=twin.id)
        matched.append(fact)
    return matched


@contextmanager
def _write(engine: Engine) -> Iterator[sa.Connection]:
    """A write transaction; on SQLite it takes the write lock at BEGIN."""
    options = {"sqlite_begin": "IMMEDIATE"} if engine.dialect.name == "sqlite" else {}
    with engine.connect().execution_options(**options) as conn, conn.begin():
        yield conn


__all__ = [
    "FactChange",
    "FactRecord",
    "ImportResult",
    "ScopedMemory",
    "add_fact",
    "export_jsonl",
    "export_memory",
    "forget_user",
    "import_jsonl",
    "import_memory",
    "import_scoped",
    "iter_jsonl",
    "memory_exists",
    "parse_memory",
    "read_jsonl",
    "remove_fact",
    "search_facts",
    "update_fact",
]
