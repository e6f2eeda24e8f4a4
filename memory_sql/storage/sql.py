"""The SQL store: PostgreSQL (psycopg 3) and SQLite through one SQLAlchemy Core implementation."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine

from ..database import database_errors, reconnecting, redacted
from ..errors import DuplicateFactError, StorageError, VersionConflictError
from ..migrations import ensure_at_head, open_engine
from ..models import Fact, MemoryDocument, Section, fact_digest, trusted_fact, utcnow
from ..schema import (
    FACT_COLUMNS,
    memory_fact_events,
    memory_facts,
    memory_scopes,
    memory_sections,
)
from ..scope import Scope
from .base import (
    Changes,
    MemoryStorage,
    _checked_save,
    apply_changes,
    diff_documents,
    sort_facts,
)
from .cache import DEFAULT_CACHE_SCOPES, DocumentCache


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
_SELECT_SECTIONS = sa.select(
    memory_sections.c.section, memory_sections.c.summary, memory_sections.c.updated_at
).where(_in_scope(memory_sections))
_SELECT_FACTS = sa.select(*FACT_COLUMNS).where(_in_scope(memory_facts))
_BUMP_VERSION = (
    sa.update(memory_scopes)
    .where(_in_scope(memory_scopes), memory_scopes.c.version == sa.bindparam("expected"))
    .values(version=memory_scopes.c.version + 1, updated_at=sa.bindparam("now"))
    .returning(memory_scopes.c.created_at)
)


def _where(table: sa.Table, scope: Scope) -> sa.ColumnElement[bool]:
    return sa.and_(
        table.c.tenant_id == scope.tenant_id,
        table.c.user_id == scope.user_id,
        table.c.agent_name == scope.agent_key,
    )


def _scope_params(scope: Scope) -> dict[str, str]:
    return {
        "scope_tenant": scope.tenant_id,
        "scope_user": scope.user_id,
        "scope_agent": scope.agent_key,
    }


def _scope_values(scope: Scope) -> dict[str, str]:
    return {"tenant_id": scope.tenant_id, "user_id": scope.user_id, "agent_name": scope.agent_key}


def _fact_row(scope: Scope, fact: Fact) -> dict[str, Any]:
    return {
        **_scope_values(scope),
        "fact_id": fact.id,
        "content": fact.content,
        "content_key": fact_digest(fact.content),
        "category": fact.category,
        "confidence": fact.confidence,
        "source_thread_id": fact.source_thread_id,
        "source_error": fact.source_error,
        "created_at": fact.created_at,
        "updated_at": fact.updated_at,
    }


def _placeholder_key(fact_id: str) -> str:
    """A content_key no digest can equal (digests are lower-case hex), unique per fact."""
    return "~" + hashlib.sha256(fact_id.encode("utf-8")).hexdigest()[:63]


def _insert_ignoring_conflict(dialect: str) -> Any:
    if dialect == "postgresql":
        return postgresql.insert(memory_scopes).on_conflict_do_nothing()
    return sqlite.insert(memory_scopes).on_conflict_do_nothing()


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
    """

    def __init__(
        self, engine_or_url: Engine | str | URL, *, cache_scopes: int = DEFAULT_CACHE_SCOPES
    ) -> None:
        if isinstance(engine_or_url, Engine):
            ensure_at_head(engine_or_url)
            self.engine = engine_or_url
            self._owns_engine = False
        else:
            self.engine = open_engine(engine_or_url)
            self._owns_engine = True
        self._write_options = (
            {"sqlite_begin": "IMMEDIATE"} if self.engine.dialect.name == "sqlite" else {}
        )
        self._cache = DocumentCache(cache_scopes)

    def __repr__(self) -> str:
        return f"SQLStorage({redacted(self.engine.url)!r})"

    def close(self) -> None:
        self._cache.clear()
        if self._owns_engine:
            self.engine.dispose()

    # load ------------------------------------------------------------------------------------

    @reconnecting
    def _load(self, scope: Scope) -> MemoryDocument:
        # Autocommit: each read is one round trip, with no BEGIN before it nor ROLLBACK after.
        with self._errors(scope), self._reader() as conn:
            head = conn.execute(_SELECT_HEAD, _scope_params(scope)).first()
            if head is not None:
                cached = self._cache.get(scope, (head.version, head.created_at))
                if cached is not None:
                    return cached.clone()
            # Every save moves the version forward in the transaction that writes its rows, so
            # rows read between two equal version reads form one consistent document.
            while head is not None:
                doc = self._read_rows(conn, scope, head.version, head.updated_at)
                again = conn.execute(_SELECT_HEAD, _scope_params(scope)).first()
                if again == head:
                    self._cache.put(scope, (head.version, head.created_at), doc)
                    return doc.clone()
                head = again
        self._cache.drop(scope)
        return MemoryDocument()

    def _read_rows(
        self, conn: Connection, scope: Scope, version: int, last_updated: Any
    ) -> MemoryDocument:
        doc = MemoryDocument(version=version, last_updated=last_updated)
        sections = conn.execute(_SELECT_SECTIONS, _scope_params(scope))
        for name, summary, updated_at in sections:
            group = doc.user if hasattr(doc.user, name) else doc.history
            setattr(group, name, Section(summary=summary, updated_at=updated_at))
        # Sorted here, not by ORDER BY, which can lure a planner onto a tenant-wide time index.
        rows = conn.execute(_SELECT_FACTS, _scope_params(scope)).all()
        doc.facts = sort_facts([trusted_fact(*row) for row in rows])
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
        in_transaction: Callable[[Connection], object] | None = None,
    ) -> int:
        """:meth:`MemoryStorage.save`, and ``in_transaction``: when the save writes, it is
        called with the save's connection after the rows are written and before the commit,
        so what it writes commits with the save, and an exception it raises rolls the whole
        save back (and is raised). It is not called when nothing changed."""
        scope, expected = _checked_save(doc, user_id, agent_name, tenant_id, expected_version)
        return self._save(scope, doc, expected, in_transaction)

    def _save(
        self,
        scope: Scope,
        doc: MemoryDocument,
        expected_version: int,
        in_transaction: Callable[[Connection], object] | None = None,
    ) -> int:
        now = utcnow()
        with self._write_transaction(scope, doc) as conn:
            created_at, base = self._claim(conn, scope, expected_version, now)
            changes = diff_documents(base, doc, now)
            if not changes:
                conn.rollback()
                return expected_version
            new_version = expected_version + 1
            self._write(conn, scope, changes, new_version, now)
            if in_transaction is not None:
                in_transaction(conn)
        stored = apply_changes(base, changes, new_version)
        stored.last_updated = now
        self._cache.put(scope, (new_version, created_at), stored)
        return new_version

    def _claim(
        self, conn: Connection, scope: Scope, expected_version: int, now: datetime
    ) -> tuple[datetime, MemoryDocument]:
        """Move the scope's version past ``expected_version`` (locking the row until commit).

        Returns the scope's creation time and its document as stored at ``expected_version``.
        """
        if expected_version == 0:
            insert = (
                _insert_ignoring_conflict(self.engine.dialect.name)
                .values(**_scope_values(scope), version=1, created_at=now, updated_at=now)
                .returning(memory_scopes.c.created_at)
            )
            if conn.execute(insert).first() is None:
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

    def _log_events(
        self, conn: Connection, scope: Scope, changes: Changes, version: int, now: datetime
    ) -> None:
        base = {**_scope_values(scope), "version": version, "occurred_at": now}
        removed = {fact_id: changes.removed[fact_id] for fact_id in changes.deleted}
        events = [
            {
                **base,
                "fact_id": f.id,
                "event": event,
                "category": f.category,
                "confidence": f.confidence,
            }
            for event, facts in (
                ("added", changes.inserted),
                ("updated", changes.updated),
                ("removed", removed.values()),
            )
            for f in facts
        ]
        if events:
            conn.execute(sa.insert(memory_fact_events), events)

    def _conflict(self, conn: Connection, scope: Scope, expected_version: int) -> None:
        actual = conn.execute(_SELECT_HEAD, _scope_params(scope)).scalar()
        raise VersionConflictError(str(scope), expected_version, actual)

    def _write(
        self, conn: Connection, scope: Scope, changes: Changes, version: int, now: datetime
    ) -> None:
        # Deletes and updates go before inserts, so a fact may take over the content of one
        # removed in the same save without tripping the unique constraint.
        if changes.deleted:
            conn.execute(
                sa.delete(memory_facts).where(
                    _where(memory_facts, scope), memory_facts.c.fact_id.in_(changes.deleted)
                )
            )
        # The unique key is checked row by row, so facts that trade contents (A takes B's old
        # text while B is reworded) first move their keys out of each other's way.
        rekeyed = [fact for fact in changes.updated if fact.id in changes.rekeyed]
        if len(rekeyed) > 1:
            for fact in rekeyed:
                conn.execute(
                    sa.update(memory_facts)
                    .where(_where(memory_facts, scope), memory_facts.c.fact_id == fact.id)
                    .values(content_key=_placeholder_key(fact.id))
                )
        for fact in changes.updated:
            row = _fact_row(scope, fact)
            conn.execute(
                sa.update(memory_facts)
                .where(_where(memory_facts, scope), memory_facts.c.fact_id == fact.id)
                .values({k: v for k, v in row.items() if k not in ("fact_id", "created_at")})
            )
        if changes.inserted:
            conn.execute(
                sa.insert(memory_facts), [_fact_row(scope, fact) for fact in changes.inserted]
            )
        self._log_events(conn, scope, changes, version, now)
        for name, section in changes.sections.items():
            conn.execute(
                sa.delete(memory_sections).where(
                    _where(memory_sections, scope), memory_sections.c.section == name
                )
            )
            if section.summary or section.updated_at is not None:
                conn.execute(
                    sa.insert(memory_sections).values(
                        **_scope_values(scope),
                        section=name,
                        summary=section.summary,
                        updated_at=section.updated_at,
                    )
                )

    # cache and errors ------------------------------------------------------------------------

    def _reader(self) -> Connection:
        return self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _write_transaction(self, scope: Scope, doc: MemoryDocument) -> Iterator[Connection]:
        """A write transaction (holding SQLite's write lock from its start) saving ``doc``."""
        with self._errors(scope, doc):
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
                except sa_exc.IntegrityError as exc:
                    if "content_key" not in str(exc.orig):
                        raise
                    duplicate = doc.duplicate_fact() if doc is not None else None
                    content = duplicate.content if duplicate is not None else None
                    raise DuplicateFactError(str(scope), content) from exc
        except ValidationError as exc:
            raise StorageError(f"memory {scope}: a stored row is invalid: {exc}") from exc
