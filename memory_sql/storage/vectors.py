"""Facts' vectors for recall by meaning (revision 0017's ``memory_fact_vectors``).

A vector belongs to one fact and one embedding model, and to the text it was made from
(``content_digest``, SHA-256 of the fact's content): vectors of another model are never read,
and a fact whose text changed since (its ``updated_at`` is later than the vector) is embedded
again. The vector itself is the little-endian float32 array, unit length (``bytea`` on
PostgreSQL, a ``BLOB`` on SQLite): portable, and exact scoring within one memory (at most
``max_facts`` vectors) is a matrix product in numpy, well under a millisecond for a thousand.

:class:`FactVectors` reads and writes them for one model, and keeps each memory's vectors
stacked in a matrix between contexts (the ``cache_scopes`` most recently used), read again
only for the facts it does not hold. numpy is needed only here, imported when first used
(the ``embeddings`` extra).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..models import Fact, utcnow
from ..schema import LIVE, memory_fact_vectors, memory_facts
from ..scope import Scope
from ..tenancy import ALL_TENANTS, acting_for

RECHECK_SECONDS = 5.0
"""Facts found without a vector are looked up again after this long (the worker embeds them)."""


def content_digest(text: str) -> str:
    """The digest a vector of ``text`` is stored with (SHA-256, hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Unembedded:
    """A live fact with no vector of the model for its current text."""

    scope: Scope
    fact_id: str
    content: str
    stored_digest: str | None
    """The digest of the vector it has (of an older text, or the same text written before
    the fact's last change of another field), if any."""


@dataclass
class _Memory:
    vectors: dict[str, tuple[str, Any]]  # fact id → (content, vector)
    checked: dict[str, float]  # fact id → when it was last found without a vector
    stacked: tuple[Any, list[str], Any] | None = None  # (key, fact ids, matrix)
    fingerprint: tuple[Any, ...] | None = None  # of the facts the stack was last checked for
    fresh_until: float = 0.0  # till then, facts of that fingerprint need no check


class FactVectors:
    """The vectors of ``model`` in ``engine``'s database."""

    def __init__(self, engine: Engine, model: str, *, cache_scopes: int = 2000) -> None:
        self.engine = engine
        self.model = model
        self.cache_scopes = cache_scopes
        self._cache: OrderedDict[tuple[str, str, str], _Memory] = OrderedDict()
        self._lock = threading.Lock()

    # reading ---------------------------------------------------------------------------------

    def matrix(
        self, scope: Scope, facts: Sequence[Fact], version: int | None = None
    ) -> tuple[list[str], Any]:
        """The ids of ``facts`` (a memory's live facts, at its stored ``version`` when known)
        that have a vector of their current text, and those vectors stacked (a float32 array,
        one row each). Given the ``version``, facts of a version already checked are not
        checked again (while some lack a vector, for :data:`RECHECK_SECONDS`).

        Raises:
            StorageError: the database could not be read.
        """
        import numpy as np

        key = (scope.tenant_id, scope.user_id, scope.agent_key)
        now = time.monotonic()
        fingerprint = _fingerprint(version, facts)
        with self._lock:
            memory = self._cache.get(key)
            if memory is None:
                memory = self._cache[key] = _Memory({}, {})
                while len(self._cache) > self.cache_scopes:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
            if (
                memory.stacked is not None
                and fingerprint is not None
                and memory.fingerprint == fingerprint
                and now < memory.fresh_until
            ):
                return memory.stacked[1], memory.stacked[2]
            wanted = [
                fact
                for fact in facts
                if (held := memory.vectors.get(fact.id)) is None or held[0] != fact.content
            ]
            wanted = [f for f in wanted if now - memory.checked.get(f.id, -1e9) > RECHECK_SECONDS]
        if wanted:
            found = self._read(scope, wanted)
            with self._lock:
                for fact in wanted:
                    vector = found.get(fact.id)
                    if vector is None:
                        memory.checked[fact.id] = now
                    else:
                        memory.vectors[fact.id] = (fact.content, vector)
                        memory.checked.pop(fact.id, None)
                        memory.stacked = None
        with self._lock:
            ids = [
                fact.id
                for fact in facts
                if (held := memory.vectors.get(fact.id)) is not None and held[0] == fact.content
            ]
            complete = len(ids) == len(facts)
            memory.fingerprint = fingerprint
            memory.fresh_until = float("inf") if complete else now + RECHECK_SECONDS
            stacked = memory.stacked
            if stacked is not None and stacked[0] == ids:
                return stacked[1], stacked[2]
            rows = (
                np.stack([memory.vectors[i][1] for i in ids])
                if ids
                else np.zeros((0, 0), dtype=np.float32)
            )
            memory.stacked = (ids, ids, rows)
            return ids, rows

    def _read(self, scope: Scope, facts: Sequence[Fact]) -> dict[str, Any]:
        """Vectors of ``facts`` whose digest is that of their current text."""
        import numpy as np

        digests = {fact.id: content_digest(fact.content) for fact in facts}
        found: dict[str, Any] = {}
        with (
            database_errors(self.engine, f"read the vectors of {scope}"),
            acting_for(scope.tenant_id),
            self.engine.connect() as conn,
        ):
            ids = list(digests)
            for start in range(0, len(ids), 500):
                rows = conn.execute(
                    _READ,
                    {
                        **_scope_params(scope),
                        "model": self.model,
                        "ids": ids[start : start + 500],
                    },
                )
                for fact_id, digest, blob in rows:
                    if digests.get(fact_id) == digest:
                        found[fact_id] = np.frombuffer(blob, dtype="<f4")
        return found

    def forget_cached(self) -> None:
        """Drop the vectors held in memory (they are read again when needed)."""
        with self._lock:
            self._cache.clear()

    # writing ---------------------------------------------------------------------------------

    def write(self, scope: Scope, vectors: Iterable[tuple[str, str, Any]]) -> int:
        """Store (fact id, content digest, vector) of ``scope``'s facts, replacing the model's
        vectors they had; a fact gone since is skipped. Returns how many were written.

        Raises:
            StorageError: the database could not be written.
        """
        now = utcnow()
        rows = [
            {
                "tenant_id": scope.tenant_id,
                "user_id": scope.user_id,
                "agent_name": scope.agent_key,
                "fact_id": fact_id,
                "model": self.model,
                "content_digest": digest,
                "dimensions": int(len(vector)),
                "vector": _encoded(vector),
                "created_at": now,
            }
            for fact_id, digest, vector in vectors
        ]
        if not rows:
            return 0
        with (
            database_errors(self.engine, f"write the vectors of {scope}"),
            acting_for(scope.tenant_id),
            self.engine.begin() as conn,
        ):
            live = set(
                conn.execute(
                    _LIVE_IDS,
                    {**_scope_params(scope), "ids": [row["fact_id"] for row in rows]},
                ).scalars()
            )
            rows = [row for row in rows if row["fact_id"] in live]
            if rows:
                conn.execute(_DELETE, rows)
                conn.execute(memory_fact_vectors.insert(), rows)
        return len(rows)

    def touch(self, scope: Scope, fact_ids: Sequence[str], when: datetime | None = None) -> None:
        """Mark the vectors of ``fact_ids`` as made now: their facts changed, not their text."""
        if not fact_ids:
            return
        rows = [
            {**_scope_params(scope), "w_fact_id": i, "w_model": self.model, "now": when or utcnow()}
            for i in fact_ids
        ]
        with (
            database_errors(self.engine, f"write the vectors of {scope}"),
            acting_for(scope.tenant_id),
            self.engine.begin() as conn,
        ):
            conn.execute(_TOUCH, rows)

    # what is left to embed ------------------------------------------------------------------

    def unembedded(
        self,
        *,
        scope: Scope | None = None,
        limit: int = 256,
        after: tuple[str, str, str, str] | None = None,
    ) -> list[Unembedded]:
        """Live facts with no vector of the model, or one older than the fact's last change;
        of ``scope`` alone, or of every memory (by key, from after ``after``: the
        (tenant, user, agent key, fact id) of the last one of the previous batch).

        The facts are read a page at a time in key order and their vectors by primary key, so
        each page costs two index range scans whatever the planner's statistics say.

        Raises:
            StorageError: the database could not be read.
        """
        found: list[Unembedded] = []
        tenant = scope.tenant_id if scope is not None else ALL_TENANTS
        page = max(limit, 500)
        with (
            database_errors(self.engine, "find the facts to embed"),
            acting_for(tenant),
            self.engine.connect() as conn,
        ):
            while len(found) < limit:
                statement = _LIVE_FACTS
                params: dict[str, Any] = {"page": page}
                if scope is not None:
                    statement = statement.where(*_SCOPED)
                    params.update(_scope_params(scope))
                if after is not None:
                    statement = statement.where(_AFTER)
                    params.update(
                        zip(("a_tenant", "a_user", "a_agent", "a_fact"), after, strict=True)
                    )
                rows = conn.execute(statement, params).all()
                if not rows:
                    break
                for key, group in groupby(rows, key=lambda row: row[:3]):
                    facts = list(group)
                    held = {
                        fact_id: (digest, made)
                        for fact_id, digest, made in conn.execute(
                            _VECTORS_OF,
                            {
                                "tenant": key[0],
                                "user": key[1],
                                "agent": key[2],
                                "model": self.model,
                                "ids": [row[3] for row in facts],
                            },
                        )
                    }
                    for t, u, a, fact_id, content, changed in facts:
                        digest, made = held.get(fact_id, (None, None))
                        if made is None or _naive(made) < _naive(changed):
                            memory = Scope.of(user_id=u, agent_name=a or None, tenant_id=t)
                            found.append(Unembedded(memory, fact_id, content, digest))
                last = rows[-1]
                after = (last[0], last[1], last[2], last[3])
                if len(rows) < page:
                    break
        return found[:limit]

    def count_unembedded(self) -> int:
        """How many live facts :meth:`unembedded` would still return, in every memory."""
        return len(self.unembedded(limit=10**12))


def _naive(moment: datetime) -> datetime:
    """UTC without its zone (SQLite's stored times carry none)."""
    return (
        moment.replace(tzinfo=None)
        if moment.tzinfo is None
        else moment.astimezone(timezone.utc).replace(tzinfo=None)
    )


def _fingerprint(version: int | None, facts: Sequence[Fact]) -> tuple[Any, ...] | None:
    """What tells one loaded state of a memory from another, cheaply: its version (a save
    moves it on) and a few of its facts (a memory forgotten and made again restarts it)."""
    if version is None or not facts:
        return None
    return (version, len(facts), facts[0].id, facts[len(facts) // 2].id, facts[-1].id)


def _encoded(vector: Any) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


def _scope_params(scope: Scope) -> dict[str, str]:
    return {"tenant": scope.tenant_id, "user": scope.user_id, "agent": scope.agent_key}


v = memory_fact_vectors.c
f = memory_facts.c
_SCOPED = (
    f.tenant_id == sa.bindparam("tenant"),
    f.user_id == sa.bindparam("user"),
    f.agent_name == sa.bindparam("agent"),
)
_READ = sa.select(v.fact_id, v.content_digest, v.vector).where(
    v.tenant_id == sa.bindparam("tenant"),
    v.user_id == sa.bindparam("user"),
    v.agent_name == sa.bindparam("agent"),
    v.model == sa.bindparam("model"),
    v.fact_id.in_(sa.bindparam("ids", expanding=True)),
)
_LIVE_IDS = sa.select(f.fact_id).where(
    *_SCOPED, LIVE, f.fact_id.in_(sa.bindparam("ids", expanding=True))
)
_DELETE = sa.delete(memory_fact_vectors).where(
    v.tenant_id == sa.bindparam("tenant_id"),
    v.user_id == sa.bindparam("user_id"),
    v.agent_name == sa.bindparam("agent_name"),
    v.fact_id == sa.bindparam("fact_id"),
    v.model == sa.bindparam("model"),
)
_TOUCH = (
    sa.update(memory_fact_vectors)
    .where(
        v.tenant_id == sa.bindparam("tenant"),
        v.user_id == sa.bindparam("user"),
        v.agent_name == sa.bindparam("agent"),
        v.fact_id == sa.bindparam("w_fact_id"),
        v.model == sa.bindparam("w_model"),
    )
    .values(created_at=sa.bindparam("now"))
)
_LIVE_FACTS = (
    sa.select(f.tenant_id, f.user_id, f.agent_name, f.fact_id, f.content, f.updated_at)
    .where(LIVE)
    .order_by(f.tenant_id, f.user_id, f.agent_name, f.fact_id)
    .limit(sa.bindparam("page", type_=sa.Integer))
)
_VECTORS_OF = sa.select(v.fact_id, v.content_digest, v.created_at).where(
    v.tenant_id == sa.bindparam("tenant"),
    v.user_id == sa.bindparam("user"),
    v.agent_name == sa.bindparam("agent"),
    v.model == sa.bindparam("model"),
    v.fact_id.in_(sa.bindparam("ids", expanding=True)),
)
_AFTER = sa.tuple_(f.tenant_id, f.user_id, f.agent_name, f.fact_id) > sa.tuple_(
    sa.bindparam("a_tenant"),
    sa.bindparam("a_user"),
    sa.bindparam("a_agent"),
    sa.bindparam("a_fact"),
)
del v, f
