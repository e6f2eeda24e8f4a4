"""Export and import of memories, one or many at a time.

The JSON Lines functions work on a SQL storage (its
:data:`~memory_sql.storage.capabilities.Capability.OPERATIONS`; an engine is taken as it is) at
the schema head: they read and write several scopes. The others work on one scope of any
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

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from pydantic import ValidationError
from sqlalchemy.engine import Engine

from ..errors import (
    ImportFileError,
)
from ..intake.guard import redacted_document
from ..models import (
    Fact,
    MemoryDocument,
)
from ..scope import Scope
from ..storage import MemoryStorage, SQLStorage
from ..storage.capabilities import engine_for
from ..storage.users import memory_keys
from .modify import describe_validation_error, modify


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
    doc = storage.load(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    return redacted_document(doc).to_deerflow()


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
        except RecursionError:
            raise ImportFileError(source, None, TOO_DEEP) from None
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
    except RecursionError:
        raise ImportFileError(source, line, TOO_DEEP) from None
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


TOO_DEEP = "not JSON this reader takes: its arrays and objects are nested too deeply"
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
    lines: Sequence[bytes | str] = (
        content.split(b"\n") if isinstance(content, bytes) else content.split("\n")
    )
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
        except RecursionError:
            raise ImportFileError(source, number, TOO_DEEP) from None
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


def import_jsonl(
    storage: MemoryStorage | Engine, content: bytes | str, *, source: str = "<input>"
) -> ImportResult:
    """Import a JSON Lines export (see :func:`read_jsonl`) into the database.

    Every line is validated before the first memory is written. Each memory is then saved in a
    transaction of its own; should the import stop half-way (a database failure), running it
    again completes it, since memories already imported are left as they are.

    Raises:
        ImportFileError: a malformed line; nothing was written.
        StorageError, VersionConflictError (after retrying).
    """
    memories = read_jsonl(content, source=source)
    engine = engine_for(storage, needed_by="a JSON Lines import")
    with SQLStorage(engine, cache_scopes=0) as uncached:
        return import_scoped(uncached, memories)


def import_scoped(storage: MemoryStorage, memories: list[ScopedMemory]) -> ImportResult:
    """Make each memory of ``memories`` (from :func:`read_jsonl`) hold what it holds, each
    saved on its own (see :func:`import_jsonl`)."""
    changed = 0
    for item in memories:
        before, after = _replace(storage, item.scope, item.memory)
        changed += before != after
    return ImportResult(memories=len(memories), changed=changed)


def export_jsonl(
    storage: MemoryStorage | Engine, out: IO[str], *, tenant_id: str | None = None
) -> int:
    """Write every memory of ``tenant_id`` (None: of the whole database) to ``out`` as JSON
    Lines (:func:`iter_jsonl`), and return how many were written."""
    written = 0
    for line in iter_jsonl(storage, tenant_id=tenant_id):
        out.write(line + "\n")
        written += 1
    return written


def iter_jsonl(storage: MemoryStorage | Engine, *, tenant_id: str | None = None) -> Iterator[str]:
    """Every memory of ``tenant_id`` (None: of the whole database) as a JSON Lines line
    (without its newline), ordered by tenant, user and agent, read one at a time.

    Each memory is read consistently on its own; memories saved while the export runs may be
    exported before or after the change.
    """
    tenant = None if tenant_id is None else Scope.of(tenant_id=tenant_id).tenant_id
    engine = engine_for(storage, needed_by="a JSON Lines export")
    keys = memory_keys(engine, tenant_id=tenant)
    with SQLStorage(engine, cache_scopes=0) as uncached:
        for tenant, user, agent in keys:
            doc = uncached.load(user_id=user, agent_name=agent or None, tenant_id=tenant)
            if doc.version == 0:  # forgotten since the keys were read
                continue
            line = {
                "tenant_id": tenant,
                "user_id": user,
                "agent_name": agent or None,
                "memory": redacted_document(doc).to_deerflow(),
            }
            yield json.dumps(line, ensure_ascii=False)


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


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

    after = modify(storage, scope, change, expected_version)
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
