"""API keys of the HTTP service: each bound to one tenant and one role; only a hash is stored.

A key reads ``msk_<key id>_<secret>``. The key id is public (it names the key in ``memory-sql
keys list`` and in logs); the secret is 32 random bytes, shown once when the key is made, and
stored as its SHA-256 (a secret that random needs no slow hash). A check hashes what the
client sent and compares in constant time, and does the same work for a key id that does not
exist, so neither a timing nor an answer tells which keys exist.

Roles, each including the one before: ``read`` (memories, facts, history, reports, the queue),
``write`` (conversations, facts, imports), ``admin`` (forgetting a user, requeueing updates).
An ``admin`` key of :data:`OPERATOR_TENANT` acts for the tenant a request names in the
``X-Memory-Tenant`` header, any tenant, and every such request is logged.

Every request's key is looked up (a revoked key is refused at once), except while the database
cannot be reached: then a key this process saw live within :data:`OUTAGE_GRACE` is still
taken, so that conversations posted during an outage are spooled (as the library's
``after_agent`` does) instead of refused; reads and writes of memories fail with the database.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors, reconnecting
from ..errors import MemorySQLError, StorageError
from ..models import utcnow
from ..schema import API_KEY_ROLES, memory_api_keys
from ..scope import Scope
from ..tenancy import outside_row_security

OPERATOR_TENANT = "_operator"
"""The tenant of operator keys: an admin key of it may act for any tenant, explicitly."""

PREFIX = "msk_"
_TOKEN = re.compile(r"msk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_DUMMY_HASH = hashlib.sha256(b"no such key").hexdigest()
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""``last_used_at`` is written at most this often per key and process (not on every request)."""
OUTAGE_GRACE = timedelta(minutes=15)
"""How long after its last successful check a key is still taken while the database is down."""


class KeyNotFoundError(MemorySQLError, LookupError):
    """No key has this id."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"no API key {key_id!r}")
        self.key_id = key_id


@dataclass(frozen=True)
class ApiKey:
    """A key as stored, without its secret."""

    key_id: str
    tenant_id: str
    role: str
    description: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    def allows(self, role: str) -> bool:
        """Whether this key's role includes ``role``."""
        return API_KEY_ROLES.index(self.role) >= API_KEY_ROLES.index(role)

    @property
    def operator(self) -> bool:
        return self.tenant_id == OPERATOR_TENANT and self.role == "admin"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "tenant_id": self.tenant_id,
            "role": self.role,
            "description": self.description,
            "created_at": _iso(self.created_at),
            "last_used_at": _iso(self.last_used_at),
            "revoked_at": _iso(self.revoked_at),
        }


def create_key(
    engine: Engine, *, tenant_id: str, role: str, description: str | None = None
) -> tuple[ApiKey, str]:
    """Make a key for ``tenant_id`` with ``role``; returns it and its full secret text, which is
    not stored and cannot be shown again.

    Raises:
        InvalidScopeError: ``tenant_id`` is malformed.
        ValueError: ``role`` is not one of read, write, admin; an operator key that is not admin.
        StorageError: the database failed.
    """
    tenant = Scope.of(tenant_id=tenant_id).tenant_id
    if role not in API_KEY_ROLES:
        raise ValueError(f"role must be one of {', '.join(API_KEY_ROLES)}, not {role!r}")
    if tenant == OPERATOR_TENANT and role != "admin":
        raise ValueError(f"keys of the operator tenant {OPERATOR_TENANT!r} must be admin keys")
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    key = ApiKey(key_id, tenant, role, description, utcnow(), None, None)
    with database_errors(engine, "create an API key"), engine.begin() as conn:
        conn.execute(
            memory_api_keys.insert().values(
                key_id=key_id,
                tenant_id=tenant,
                role=role,
                secret_sha256=_hash(secret),
                description=description,
                created_at=key.created_at,
            )
        )
    return key, f"{PREFIX}{key_id}_{secret}"


def list_keys(engine: Engine, *, tenant_id: str | None = None) -> list[ApiKey]:
    """Every key (of ``tenant_id``), oldest first, revoked ones too."""
    statement = sa.select(*_COLUMNS).order_by(
        memory_api_keys.c.created_at, memory_api_keys.c.key_id
    )
    if tenant_id is not None:
        statement = statement.where(
            memory_api_keys.c.tenant_id == Scope.of(tenant_id=tenant_id).tenant_id
        )
    with database_errors(engine, "list API keys"), engine.connect() as conn:
        return [ApiKey(*row) for row in conn.execute(statement)]


def revoke_key(engine: Engine, key_id: str) -> ApiKey:
    """Revoke ``key_id`` (from now on it authenticates nothing); revoking twice keeps the first
    time. Raises :class:`KeyNotFoundError`."""
    key_id = key_id.strip()
    if key_id.startswith(PREFIX):  # the whole secret text was given: take its id
        match = _TOKEN.fullmatch(key_id)
        key_id = match.group(1) if match else key_id
    with database_errors(engine, "revoke an API key"), engine.begin() as conn:
        conn.execute(
            memory_api_keys.update()
            .where(memory_api_keys.c.key_id == key_id, memory_api_keys.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        row = conn.execute(
            sa.select(*_COLUMNS).where(memory_api_keys.c.key_id == key_id)
        ).one_or_none()
    if row is None:
        raise KeyNotFoundError(key_id)
    return ApiKey(*row)


class KeyChecker:
    """Authenticates the keys of requests against the table; safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._last_written: dict[str, datetime] = {}
        # key id -> (secret hash, key, when last found live): for outages only.
        self._seen_live: dict[str, tuple[str, ApiKey, datetime]] = {}

    def check(self, token: str) -> ApiKey | None:
        """The live key ``token`` is the secret text of, or None (unknown, wrong or revoked).

        Raises:
            StorageError: the database failed, and the key was not seen live here within
                :data:`OUTAGE_GRACE`.
        """
        match = _TOKEN.fullmatch(token)
        key_id, secret = match.groups() if match else ("", token)
        row = None
        if key_id:
            try:
                row = self._lookup(key_id)
            except StorageError:
                key = self._seen_during_outage(key_id, secret)
                if key is None:
                    raise
                return key
        stored = row.secret_sha256 if row is not None else _DUMMY_HASH
        matches = hmac.compare_digest(_hash(secret), stored)
        if row is None or not matches or row.revoked_at is not None:
            self._seen_live.pop(key_id, None)
            return None
        key = ApiKey(*row[: len(_COLUMNS)])
        self._seen_live[key_id] = (stored, key, utcnow())
        self._touch(key)
        return key

    @reconnecting
    def _lookup(self, key_id: str) -> Any:
        # The keys are not under row-level security: any pooled connection will do, left set
        # to whichever tenant it last served (no round trip to change it).
        with (
            database_errors(self.engine, "check an API key"),
            outside_row_security(),
            self.engine.connect() as conn,
        ):
            return conn.execute(_BY_ID, {"key_id": key_id}).one_or_none()

    def _seen_during_outage(self, key_id: str, secret: str) -> ApiKey | None:
        seen = self._seen_live.get(key_id)
        if seen is None or utcnow() - seen[2] > OUTAGE_GRACE:
            return None
        if not hmac.compare_digest(_hash(secret), seen[0]):
            return None
        return seen[1]

    def _touch(self, key: ApiKey) -> None:
        now = utcnow()
        last = self._last_written.get(key.key_id)
        if last is not None and now - last < LAST_USED_RESOLUTION:
            return
        self._last_written[key.key_id] = now
        with (
            database_errors(self.engine, "record an API key's use"),
            outside_row_security(),
            self.engine.begin() as conn,
        ):
            conn.execute(
                memory_api_keys.update()
                .where(memory_api_keys.c.key_id == key.key_id)
                .values(last_used_at=now)
            )


_COLUMNS = (
    memory_api_keys.c.key_id,
    memory_api_keys.c.tenant_id,
    memory_api_keys.c.role,
    memory_api_keys.c.description,
    memory_api_keys.c.created_at,
    memory_api_keys.c.last_used_at,
    memory_api_keys.c.revoked_at,
)
_BY_ID = sa.select(*_COLUMNS, memory_api_keys.c.secret_sha256).where(
    memory_api_keys.c.key_id == sa.bindparam("key_id")
)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None


__all__ = [
    "OPERATOR_TENANT",
    "ApiKey",
    "KeyChecker",
    "KeyNotFoundError",
    "create_key",
    "list_keys",
    "revoke_key",
]
