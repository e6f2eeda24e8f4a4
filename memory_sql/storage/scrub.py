"""Secrets already stored, found and redacted in place: the SQL of ``memory-sql db scrub``.

Every text a memory database keeps of what users said is read in batches (keyset pages of
:data:`BATCH_ROWS` rows, each page its own short transaction) and passed through ``redact``
(a :class:`~memory_sql.intake.redact.Redactor`'s ``redact``, given by the caller: storage does
not know the rules): facts (``content``, ``source_error``, live and closed: the key, digest and
searchable text follow the content), fact events (``content_before``, ``content_after``),
sections (``summary``), queue rows (``messages``, ``reply``, ``last_error``: JSON is read, its
strings redacted, and written back as JSON), memory-LLM calls (``error``) and budget holds
(``last_reason``). A row is written only when its text changed, so a second run finds nothing
(idempotent). A memory whose facts or sections changed gets its version raised, so caches
elsewhere reload it. Closed versions are rewritten in place, not archived: the secret must not
survive in a past version.

A live fact whose redacted text duplicates another live fact's is closed (a removed version)
rather than stored twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..driver_errors import is_refusal
from ..models import fact_digest, utcnow
from ..schema import (
    memory_fact_events,
    memory_facts,
    memory_llm_budget_holds,
    memory_llm_calls,
    memory_pending_updates,
    memory_scopes,
    memory_sections,
)
from ..text_search import search_text

BATCH_ROWS = 500
"""Rows read, redacted and written per transaction."""

Redact = Callable[[str], Any]
"""``text`` → an object with ``.text`` (redacted) and ``.counts`` (kind → number)."""

_JSON_COLUMNS = frozenset({"messages", "reply"})
_TABLES: tuple[tuple[sa.Table, tuple[str, ...]], ...] = (
    (memory_facts, ("content", "source_error")),
    (memory_fact_events, ("content_before", "content_after")),
    (memory_sections, ("summary",)),
    (memory_pending_updates, ("messages", "reply", "last_error")),
    (memory_llm_calls, ("error",)),
    (memory_llm_budget_holds, ("last_reason",)),
)


@dataclass
class ScrubResult:
    """What a scrub found: rows changed per table, secrets per kind, and per tenant and kind."""

    rows: dict[str, int] = field(default_factory=dict)
    kinds: Counter[str] = field(default_factory=Counter)
    by_tenant: Counter[tuple[str, str]] = field(default_factory=Counter)
    closed_duplicates: int = 0

    @property
    def secrets(self) -> int:
        return sum(self.kinds.values())


def scrub(
    engine: Engine,
    redact: Redact,
    *,
    dry_run: bool = False,
    tenant_id: str | None = None,
    batch_rows: int = BATCH_ROWS,
) -> ScrubResult:
    """Redact the secrets stored in ``engine``'s memory tables (all tenants, or ``tenant_id``'s);
    ``dry_run`` counts them and writes nothing. See the module docstring."""
    result = ScrubResult()
    for table, columns in _TABLES:
        result.rows[table.name] = 0
        for page in _pages(engine, table, columns, tenant_id, batch_rows):
            changes = []
            for row in page:
                new: dict[str, Any] = {}
                for column in columns:
                    value = row[column]
                    if value is None:
                        continue
                    text, counts = _redact_value(value, column in _JSON_COLUMNS, redact)
                    if counts:
                        new[column] = text
                        result.kinds.update(counts)
                        for kind, number in counts.items():
                            result.by_tenant[(row["tenant_id"], kind)] += number
                if new:
                    changes.append((row, new))
            result.rows[table.name] += len(changes)
            if changes and not dry_run:
                with engine.begin() as conn:
                    _write(conn, table, changes, result)
    return result


def _pages(
    engine: Engine, table: sa.Table, columns: tuple[str, ...], tenant_id: str | None, size: int
) -> Iterator[list[dict[str, Any]]]:
    key = list(table.primary_key.columns)
    selected = [*key, *(table.c[name] for name in columns)]
    if table is memory_facts:
        selected.append(table.c.valid_to)
    last: tuple[Any, ...] | None = None
    while True:
        query = sa.select(*selected).order_by(*key).limit(size)
        if tenant_id is not None:
            query = query.where(table.c.tenant_id == tenant_id)
        if last is not None:
            query = query.where(sa.tuple_(*key) > sa.tuple_(*last))
        with engine.connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query)]
        if not rows:
            return
        yield rows
        last = tuple(rows[-1][column.name] for column in key)
        if len(rows) < size:
            return


def _redact_value(value: str, is_json: bool, redact: Redact) -> tuple[str, dict[str, int]]:
    if is_json:
        try:
            data = json.loads(value)
        except ValueError:
            pass
        else:
            counts: Counter[str] = Counter()
            cleaned = _walk(data, redact, counts)
            if not counts:
                return value, {}
            return json.dumps(cleaned, ensure_ascii=False), dict(counts)
    result = redact(value)
    return result.text, dict(result.counts)


def _walk(value: Any, redact: Redact, counts: Counter[str]) -> Any:
    if isinstance(value, str):
        result = redact(value)
        counts.update(result.counts)
        return result.text
    if isinstance(value, list):
        return [_walk(item, redact, counts) for item in value]
    if isinstance(value, dict):
        return {key: _walk(item, redact, counts) for key, item in value.items()}
    return value


def _write(
    conn: Connection,
    table: sa.Table,
    changes: list[tuple[dict[str, Any], dict[str, Any]]],
    result: ScrubResult,
) -> None:
    key = list(table.primary_key.columns)
    scopes: set[tuple[str, str, str]] = set()
    for row, new in changes:
        where = sa.and_(*(column == row[column.name] for column in key))
        values = dict(new)
        if table is memory_facts and "content" in new:
            values["content_key"] = fact_digest(new["content"])
            values["search_text"] = search_text(new["content"])
        if table is memory_facts and row["valid_to"] is None and "content" in new:
            try:
                with conn.begin_nested():
                    conn.execute(sa.update(table).where(where).values(**values))
            except Exception as exc:  # a duplicate of another live fact once redacted
                if not is_refusal(exc, "uq_memory_facts_live_content_key"):
                    raise
                values["valid_to"] = utcnow()
                del values["content_key"]
                conn.execute(sa.update(table).where(where).values(**values))
                result.closed_duplicates += 1
        else:
            conn.execute(sa.update(table).where(where).values(**values))
        if table in (memory_facts, memory_sections):
            scopes.add((row["tenant_id"], row["user_id"], row["agent_name"]))
    for tenant, user, agent in sorted(scopes):
        conn.execute(
            sa.update(memory_scopes)
            .where(
                memory_scopes.c.tenant_id == tenant,
                memory_scopes.c.user_id == user,
                memory_scopes.c.agent_name == agent,
            )
            .values(version=memory_scopes.c.version + 1, updated_at=utcnow())
        )
