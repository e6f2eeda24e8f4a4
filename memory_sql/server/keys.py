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
A key revoked while this process could still reach the database is not (see
:class:`KeyChecker`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from ..database import reconnecting
from ..errors import MemorySQLError, StorageError
from ..models import utcnow
from ..schema import API_KEY_ROLES
from ..scope import Scope
from ..storage import api_keys
from ..storage.api_keys import NEVER as _NEVER

OPERATOR_TENANT = "_operator"
"""The tenant of operator keys: an admin key of it may act for any tenant, explicitly."""

PREFIX = "msk_"
_TOKEN = re.compile(r"msk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""``last_used_at`` is written at most this often per key and process (not on every request)."""
OUTAGE_GRACE = timedelta(minutes=15)
"""How long after its last successful check a key is still taken while the database is down."""
GRACE_SYNC_INTERVAL = timedelta(seconds=1)
"""How often (at most) the outage grace list is compared with the table, to drop revoked keys."""


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
    api_keys.insert(
        engine,
        key_id=key_id,
        tenant_id=tenant,
        role=role,
        secret_sha256=_hash(secret),
        description=description,
        created_at=key.created_at,
    )
    return key, f"{PREFIX}{key_id}_{secret}"


def list_keys(engine: Engine, *, tenant_id: str | None = None) -> list[ApiKey]:
    """Every key (of ``tenant_id``), oldest first, revoked ones too."""
    tenant = None if tenant_id is None else Scope.of(tenant_id=tenant_id).tenant_id
    return [ApiKey(*row) for row in api_keys.rows(engine, tenant_id=tenant)]


def revoke_key(engine: Engine, key_id: str) -> ApiKey:
    """Revoke ``key_id`` (from now on it authenticates nothing); revoking twice keeps the first
    time. Raises :class:`KeyNotFoundError`."""
    key_id = key_id.strip()
    if key_id.startswith(PREFIX):  # the whole secret text was given: take its id
        match = _TOKEN.fullmatch(key_id)
        key_id = match.group(1) if match else key_id
    row = api_keys.revoke(engine, key_id, utcnow())
    if row is None:
        raise KeyNotFoundError(key_id)
    return ApiKey(*row)


class KeyChecker:
    """Authenticates the keys of requests against the table; safe to share between threads.

    The outage grace list (keys found live, for when the database cannot be reached) changes
    only on what the database said: a key is added when a check finds it live, and removed
    when a lookup finds it revoked or gone, or when the list is compared with the table (at
    most every :data:`GRACE_SYNC_INTERVAL`, on a check that reached the database). A wrong
    secret, or a failed lookup, never changes it: a forged request cannot take a live key's
    grace away, and a key revoked while this process could reach the database is dropped
    from the list before the outage.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._last_written: dict[str, datetime] = {}
        # key id -> (secret hash, key, when last found live): for outages only.
        self._seen_live: dict[str, tuple[str, ApiKey, datetime]] = {}
        self._synced = utcnow()

    def check(self, token: str) -> ApiKey | None:
        """The live key ``token`` is the secret text of, or None (unknown, wrong or revoked).

        A key id that exists and one that does not take the same work: the lookup returns one
        row of the same shape either way, and the same digest is compared.

        Raises:
            StorageError: the database failed, and the key was not seen live here within
                :data:`OUTAGE_GRACE`.
        """
        match = _TOKEN.fullmatch(token)
        if match is None:
            return None  # not even the shape of a key: nothing to look up
        key_id, secret = match.groups()
        try:
            row = self._lookup(key_id)
        except StorageError:
            key = self._seen_during_outage(key_id, secret)
            if key is None:
                raise
            return key
        matches = hmac.compare_digest(_hash(secret), row.secret_sha256)
        revoked = row.revoked_at != _NEVER
        if not row.found or revoked:
            self._seen_live.pop(key_id, None)  # the database says it is not live
        self._sync_grace()
        if not row.found or revoked or not matches:
            return None
        last_used = None if row.last_used_at == _NEVER else row.last_used_at
        key = ApiKey(
            row.key_id, row.tenant_id, row.role, row.description, row.created_at, last_used, None
        )
        self._seen_live[key_id] = (row.secret_sha256, key, utcnow())
        self._touch(key)
        return key

    @reconnecting
    def _lookup(self, key_id: str) -> Any:
        return api_keys.lookup(self.engine, key_id)

    def _sync_grace(self) -> None:
        """Drop from the grace list the keys revoked or deleted since they were found live
        (by another process: ``memory-sql keys revoke``), at most every
        :data:`GRACE_SYNC_INTERVAL`."""
        now = utcnow()
        if now - self._synced < GRACE_SYNC_INTERVAL or not self._seen_live:
            return
        self._synced = now
        ids = list(self._seen_live)
        try:
            live = api_keys.live(self.engine, ids)
        except StorageError:
            return  # not a successful check: the list stays as it is
        for key_id in ids:
            seen = self._seen_live.get(key_id)
            if seen is not None and (key_id, seen[0]) not in live:
                self._seen_live.pop(key_id, None)

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
        api_keys.touch(self.engine, key.key_id, now)


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
