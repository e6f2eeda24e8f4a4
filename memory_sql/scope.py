"""Memory scopes: who a memory belongs to, validated before any query or path is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from .errors import InvalidScopeError

DEFAULT_TENANT = "default"
DEFAULT_USER = "default"

AGENT_PATTERN = re.compile(r"[A-Za-z0-9-]+")
# A user or tenant id may be an e-mail address or a UUID, but never a path or a query fragment:
# no slash, backslash, quote, whitespace or control character, and no leading dot.
ID_PATTERN = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_@+.-]*")

MAX_AGENT_LENGTH = 64
MAX_USER_LENGTH = 128
MAX_TENANT_LENGTH = 64


def _check(field: str, value: object, pattern: re.Pattern[str], max_len: int, rule: str) -> str:
    if not isinstance(value, str):
        raise InvalidScopeError(field, value, f"must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidScopeError(field, value, "must not be empty")
    if len(value) > max_len:
        raise InvalidScopeError(field, value[:40] + "…", f"longer than {max_len} characters")
    if not pattern.fullmatch(value):
        raise InvalidScopeError(field, value, rule)
    return value


# Scopes already checked, by the arguments of Scope.of (a scope is immutable): the check of
# three ids costs more than a cached load's own Python.
_known: dict[tuple[object, object, object], Scope] = {}
_MAX_KNOWN = 4096


class ScopeArguments(TypedDict):
    """The keyword arguments that name a memory (:meth:`Scope.arguments`)."""

    user_id: str | None
    agent_name: str | None
    tenant_id: str | None


@dataclass(frozen=True, slots=True)
class Scope:
    """One memory: a tenant's user, optionally narrowed to one agent.

    ``agent_name`` is stored lower-cased (``Coder`` and ``coder`` share a memory, as in DeerFlow);
    ``None`` is the memory shared by agents that have no name.
    """

    tenant_id: str
    user_id: str
    agent_name: str | None

    @classmethod
    def of(
        cls,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
    ) -> Scope:
        """The scope of these ids (``None``: the defaults), checked; raises
        :class:`~memory_sql.InvalidScopeError` naming the field that is not a valid id."""
        key = (tenant_id, user_id, agent_name)
        try:
            known = _known.get(key)
        except TypeError:  # unhashable: not an id, as _check says below
            known = None
        if known is not None:
            return known
        scope = cls._checked(user_id, agent_name, tenant_id)
        if len(_known) >= _MAX_KNOWN:
            _known.clear()
        _known[key] = scope
        return scope

    @classmethod
    def _checked(cls, user_id: str | None, agent_name: str | None, tenant_id: str | None) -> Scope:
        tenant = _check(
            "tenant_id",
            DEFAULT_TENANT if tenant_id is None else tenant_id,
            ID_PATTERN,
            MAX_TENANT_LENGTH,
            "use letters, digits and _ @ + . - (not first: .)",
        )
        user = _check(
            "user_id",
            DEFAULT_USER if user_id is None else user_id,
            ID_PATTERN,
            MAX_USER_LENGTH,
            "use letters, digits and _ @ + . - (not first: .)",
        )
        agent = None
        if agent_name is not None:
            agent = _check(
                "agent_name",
                agent_name,
                AGENT_PATTERN,
                MAX_AGENT_LENGTH,
                "must match ^[A-Za-z0-9-]+$",
            ).lower()
        return cls(tenant, user, agent)

    def arguments(self) -> ScopeArguments:
        """This scope as the keyword arguments that name a memory in the public API
        (``storage.load(**scope.arguments())``)."""
        return {"user_id": self.user_id, "agent_name": self.agent_name, "tenant_id": self.tenant_id}

    @property
    def agent_key(self) -> str:
        """``agent_name`` as stored: the empty string stands for no agent."""
        return self.agent_name or ""

    def __str__(self) -> str:
        agent = self.agent_name or "-"
        return f"{self.tenant_id}/{self.user_id}/{agent}"


MAX_THREAD_ID_LENGTH = 256


def check_thread_id(thread_id: object) -> str:
    """``thread_id`` if it is a non-empty string that fits the tables, else
    :class:`InvalidScopeError` naming ``thread_id``."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidScopeError("thread_id", thread_id, "must be a non-empty string")
    if len(thread_id) > MAX_THREAD_ID_LENGTH:
        raise InvalidScopeError(
            "thread_id", thread_id[:40] + "…", f"longer than {MAX_THREAD_ID_LENGTH} characters"
        )
    if "\x00" in thread_id or not thread_id.isprintable():
        raise InvalidScopeError("thread_id", thread_id, "must be printable text")
    return thread_id
