"""Who is calling: the API key of a request, the tenant it acts for, and what its role allows.

A request carries ``Authorization: Bearer msk_…``. Its tenant is the key's; no route takes a
tenant from the client, except that an admin key of the operator tenant must name the tenant it
acts for in ``X-Memory-Tenant`` (and every such request is logged). Failures: no or an unknown
or revoked key 401, a role too small 403, a tenant header from an ordinary key that names
another tenant 403.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..scope import Scope
from ..tenancy import acting_for
from .errors import ApiError
from .keys import ApiKey, KeyChecker

logger = logging.getLogger("memory_sql.server.auth")

TENANT_HEADER = "X-Memory-Tenant"


@dataclass(frozen=True)
class Caller:
    """The key of a request and the tenant it acts for."""

    key: ApiKey
    tenant_id: str

    @contextmanager
    def acting(self) -> Iterator[None]:
        """Database work in this block sees only this tenant's rows (PostgreSQL RLS)."""
        with acting_for(self.tenant_id):
            yield


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="API key",
    description="A key made by `memory-sql keys create` (msk_…); it names the tenant.",
)


def _authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    named: Annotated[
        str | None,
        Header(
            alias=TENANT_HEADER,
            description="Operator keys only: the tenant to act for (any other key: its own, "
            "or left out).",
        ),
    ] = None,
) -> Caller:
    token = credentials.credentials.strip() if credentials is not None else ""
    return identify(request, request.app.state.memory.keys, token, named)


def identify(request: Request, keys: KeyChecker, token: str, named: str | None) -> Caller:
    """The :class:`Caller` of a request that sent the key ``token`` (``""``: none) and named
    the tenant ``named`` (the ``X-Memory-Tenant`` header); raises :class:`ApiError` (401,
    400, 403) as described above. Every surface of the service (the routes, ``/mcp``)
    authenticates here."""
    if not token:
        raise _unauthorized("missing API key: send Authorization: Bearer <key>")
    key = keys.check(token)
    if key is None:
        raise _unauthorized("invalid or revoked API key")
    request.state.key_id = key.key_id
    if key.operator:
        if not named:
            raise ApiError(
                400, "invalid_request", f"an operator key must name a tenant in {TENANT_HEADER}"
            )
        tenant = Scope.of(tenant_id=named).tenant_id
        logger.info("operator key %s acts for tenant %s", key.key_id, tenant)
    else:
        tenant = key.tenant_id
        if named is not None and named != tenant:
            raise ApiError(403, "forbidden", "this key cannot act for another tenant")
    request.state.tenant_id = tenant
    return Caller(key, tenant)


def require(role: str) -> Callable[..., Awaitable[Caller]]:
    """A dependency giving the :class:`Caller`, whose key must allow ``role``."""

    async def dependency(caller: Annotated[Caller, Depends(_authenticate)]) -> Caller:
        if not caller.key.allows(role):
            raise ApiError(403, "forbidden", f"this key's role ({caller.key.role}) cannot {role}")
        return caller

    return dependency


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


Reader = Annotated[Caller, Depends(require("read"))]
Writer = Annotated[Caller, Depends(require("write"))]
Admin = Annotated[Caller, Depends(require("admin"))]
