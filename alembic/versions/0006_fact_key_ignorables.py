"""Fact keys ignore invisible characters: content_key recomputed, the duplicates it reveals merged.

The fact key now removes Unicode's default-ignorable code points (zero-width space, soft hyphen,
joiners, bidi marks, variation selectors, …) before folding, so ``"Py\\u200bthon"`` and
``"python"`` are one fact. This revision recomputes ``memory_facts.content_key`` of every stored
fact. Facts of one scope that now share a key are merged: the one with the highest confidence
stays (then the earliest ``created_at``, then the smallest ``fact_id``), the others are deleted
and logged as ``removed`` events. Every scope whose rows change (a key rewritten, a fact deleted)
moves its version forward by one, as every save does, so process-local caches of its document
are dropped.

Both key functions are frozen copies here: the live ``memory_sql.fact_key`` may change again, and
this revision must keep computing the keys it was written for.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, NamedTuple

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BATCH_SIZE = 1000
"""Fact rows read per query, in primary-key order."""

_WHITESPACE = re.compile(r"\s+")
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), as of revision 0006.
_DEFAULT_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def _key_0005(content: str) -> str:
    """The fact key up to revision 0005: NFKC, casefold, whitespace folding."""
    folded = unicodedata.normalize("NFKC", content)
    folded = unicodedata.normalize("NFKC", folded.casefold())
    return _WHITESPACE.sub(" ", folded).strip()


def _key_0006(content: str) -> str:
    """The fact key from revision 0006: default-ignorable code points removed, then as 0005."""
    folded = unicodedata.normalize("NFKC", _DEFAULT_IGNORABLE.sub("", content))
    folded = unicodedata.normalize("NFKC", folded.casefold())
    return _WHITESPACE.sub(" ", folded).strip()


def _digest(key: Callable[[str], str], content: str) -> str:
    return hashlib.sha256(key(content).encode("utf-8")).hexdigest()


def _placeholder_key(fact_id: str) -> str:
    """A content_key no digest can equal (digests are lower-case hex), unique per fact."""
    return "~" + hashlib.sha256(fact_id.encode("utf-8")).hexdigest()[:63]


_SCOPE = ("tenant_id", "user_id", "agent_name")

_scopes = sa.table(
    "memory_scopes",
    *(sa.column(name, sa.String()) for name in _SCOPE),
    sa.column("version", sa.Integer()),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
_facts = sa.table(
    "memory_facts",
    *(sa.column(name, sa.String()) for name in _SCOPE),
    sa.column("fact_id", sa.String()),
    sa.column("content", sa.Text()),
    sa.column("content_key", sa.String()),
    sa.column("category", sa.String()),
    sa.column("confidence", sa.Float()),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
_events = sa.table(
    "memory_fact_events",
    *(sa.column(name, sa.String()) for name in _SCOPE),
    sa.column("version", sa.Integer()),
    sa.column("fact_id", sa.String()),
    sa.column("event", sa.String()),
    sa.column("category", sa.String()),
    sa.column("confidence", sa.Float()),
    sa.column("occurred_at", sa.DateTime(timezone=True)),
)

_PK = (_facts.c.tenant_id, _facts.c.user_id, _facts.c.agent_name, _facts.c.fact_id)


def _rows(conn: sa.Connection) -> Iterator[Any]:
    """Every fact row in primary-key order, ``BATCH_SIZE`` per query (keyset pagination: rows
    already returned may be rewritten or deleted between two queries)."""
    columns = ("content", "content_key", "category", "confidence", "created_at")
    query = sa.select(*_PK, *(_facts.c[name] for name in columns)).order_by(*_PK)
    after: tuple[Any, ...] | None = None
    while True:
        page = query if after is None else query.where(sa.tuple_(*_PK) > sa.tuple_(*after))
        batch = conn.execute(page.limit(BATCH_SIZE)).all()
        yield from batch
        if len(batch) < BATCH_SIZE:
            return
        after = tuple(batch[-1][:4])


class _Fact(NamedTuple):
    fact_id: str
    stored_key: str
    key: str
    category: str
    confidence: float
    created_at: datetime


def _by_scope(conn: sa.Connection, key: Callable[[str], str]) -> Iterator[tuple[dict, list]]:
    """Each scope (its primary key as a dict) with its facts, the ``key`` digest of each
    computed; a scope is given once all its rows are read, and contents are not kept."""
    scope: tuple[str, ...] | None = None
    facts: list[_Fact] = []
    for row in _rows(conn):
        if tuple(row[:3]) != scope:
            if scope is not None:
                yield dict(zip(_SCOPE, scope, strict=True)), facts
            scope, facts = tuple(row[:3]), []
        digest = _digest(key, row.content)
        facts.append(
            _Fact(
                row.fact_id, row.content_key, digest, row.category, row.confidence, row.created_at
            )
        )
    if scope is not None:
        yield dict(zip(_SCOPE, scope, strict=True)), facts


def _in_scope(table: Any, scope: dict[str, str]) -> Any:
    return sa.and_(*(table.c[name] == value for name, value in scope.items()))


def _rekey_scope(
    conn: sa.Connection, scope: dict[str, str], facts: list[_Fact], now: datetime
) -> None:
    """Give the scope's facts their new keys, merging those that now share one."""
    winners: dict[str, _Fact] = {}
    losers: list[_Fact] = []
    # The highest confidence first, then the earliest created_at, then the smallest fact_id.
    for fact in sorted(facts, key=lambda f: (-f.confidence, f.created_at, f.fact_id)):
        if fact.key in winners:
            losers.append(fact)
        else:
            winners[fact.key] = fact
    rekeyed = [f for f in winners.values() if f.stored_key != f.key]
    if not losers and not rekeyed:
        return

    conn.execute(
        sa.update(_scopes)
        .where(_in_scope(_scopes, scope))
        .values(version=_scopes.c.version + 1, updated_at=now)
    )
    version = conn.execute(sa.select(_scopes.c.version).where(_in_scope(_scopes, scope))).scalar()

    # The unique key is checked row by row: the merged-away facts go first, and when a new key
    # is still held by another fact's old one, every rewritten key moves through a placeholder.
    losing = [f.fact_id for f in losers]
    for start in range(0, len(losing), BATCH_SIZE):
        chunk = _facts.c.fact_id.in_(losing[start : start + BATCH_SIZE])
        conn.execute(sa.delete(_facts).where(_in_scope(_facts, scope), chunk))
    if losers:
        events = [
            {
                **scope,
                "version": version,
                "fact_id": f.fact_id,
                "event": "removed",
                "category": f.category,
                "confidence": f.confidence,
                "occurred_at": now,
            }
            for f in losers
        ]
        conn.execute(sa.insert(_events), events)
    if not rekeyed:
        return
    holder = {f.stored_key: f.fact_id for f in winners.values()}
    update = (
        sa.update(_facts)
        .where(_in_scope(_facts, scope), _facts.c.fact_id == sa.bindparam("b_fact_id"))
        .values(content_key=sa.bindparam("b_key"))
    )
    if any(holder.get(f.key, f.fact_id) != f.fact_id for f in rekeyed):
        placeholders = [
            {"b_fact_id": f.fact_id, "b_key": _placeholder_key(f.fact_id)} for f in rekeyed
        ]
        conn.execute(update, placeholders)
    conn.execute(update, [{"b_fact_id": f.fact_id, "b_key": f.key} for f in rekeyed])


def _rekey(key: Callable[[str], str]) -> None:
    conn = op.get_bind()
    now = datetime.now(timezone.utc)
    if conn.dialect.name == "sqlite":  # SQLite keeps UTC timestamps without a zone
        now = now.replace(tzinfo=None)
    for scope, facts in _by_scope(conn, key):
        _rekey_scope(conn, scope, facts, now)


def upgrade() -> None:
    _rekey(_key_0006)


def downgrade() -> None:
    """content_key recomputed with the 0005 key, which keeps invisible characters.

    Facts merged by the upgrade stay merged: the deleted ones are not restored. Scopes whose keys
    change move their version forward by one, as in the upgrade. (No two facts can share a 0005
    key after the upgrade, since they would then share a 0006 key too; were there any, they would
    be merged the same way.)
    """
    _rekey(_key_0005)
