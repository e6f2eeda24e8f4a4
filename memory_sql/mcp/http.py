"""The MCP server over Streamable HTTP at ``/mcp`` of the service's own application.

Every request to ``/mcp`` is authenticated as the routes' are
(:func:`memory_sql.server.auth.identify`: ``Authorization: Bearer msk_…``, an operator key
with ``X-Memory-Tenant``); the tools then act for the key's tenant only, inside its
``acting_for`` (PostgreSQL row-level security), with the key's role (a ``read`` key cannot
add a fact). ``X-Memory-User`` fixes the user, as ``memory-sql mcp --user`` does over stdio,
and ``X-Memory-Agent`` names the agent of a call that names none, as ``--agent`` does.

The transport is stateless and answers JSON: any process behind a load balancer can answer
any request, and nothing is held between requests. The SDK's DNS-rebinding check (of
``Host`` and ``Origin``) is off, since a request without a key gets nothing: a page that
rebinds a name to this service cannot send its key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from ..errors import MemorySQLError
from ..scope import Scope as MemoryScope
from ..server.auth import TENANT_HEADER, identify
from ..server.errors import ApiError, error_response
from ..server.state import ServerState
from . import HTTP_PATH as PATH
from .backends import LocalMemory
from .tools import Access, build_server

USER_HEADER = "X-Memory-User"
AGENT_HEADER = "X-Memory-Agent"
_ACCESS = "memory_sql_mcp_access"


class McpEndpoint:
    """The ASGI endpoint of ``/mcp``: authenticates, then hands the request to the SDK's
    Streamable HTTP session manager. ``state`` gives the service's :class:`ServerState`
    (made when the application starts)."""

    def __init__(self, state: Callable[[], ServerState]) -> None:
        self._state = state
        self.server = build_server(_access_of_request)
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager's task group, for the application's lifespan."""
        async with self.server.session_manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            access = await anyio.to_thread.run_sync(self._authenticate, request)
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message, exc.headers)(
                scope, receive, send
            )
            return
        except MemorySQLError:  # the keys' database cannot be read
            request_id = scope.get("state", {}).get("request_id", "-")
            response = error_response(
                503,
                "database_unavailable",
                f"the database is unavailable (request id {request_id})",
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[_ACCESS] = access
        await self.server.session_manager.handle_request(scope, receive, send)

    def _authenticate(self, request: Request) -> Access:
        state = self._state()
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if header and scheme.lower() != "bearer":
            token = ""
        caller = identify(request, state.keys, token.strip(), request.headers.get(TENANT_HEADER))
        user = request.headers.get(USER_HEADER)
        if user is not None:
            try:
                user = MemoryScope.of(user_id=user).user_id
            except ValueError as exc:
                raise ApiError(400, "invalid_request", f"{USER_HEADER}: {exc}") from None
        agent = request.headers.get(AGENT_HEADER)
        if agent is not None:
            try:
                agent = MemoryScope.of(user_id="mcp", agent_name=agent).agent_name
            except ValueError as exc:
                raise ApiError(400, "invalid_request", f"{AGENT_HEADER}: {exc}") from None
        return Access(
            LocalMemory(state.service, caller.tenant_id),
            user_id=user,
            agent_name=agent,
            role=caller.key.role,
        )


def _access_of_request(ctx: Context | None) -> Access:
    request = None if ctx is None else ctx.request_context.request
    access = None if request is None else request.scope.get("state", {}).get(_ACCESS)
    if not isinstance(access, Access):  # not through McpEndpoint: never served
        raise PermissionError("this request was not authenticated")
    return access


__all__ = ["AGENT_HEADER", "PATH", "USER_HEADER", "McpEndpoint"]
