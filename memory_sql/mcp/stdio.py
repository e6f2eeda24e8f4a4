"""``memory-sql mcp``: the MCP server over stdio, for a local agent (Claude Desktop, an IDE).

Its memory is either a local database (:func:`local_access`: SQLite or PostgreSQL, with its
own worker learning from the conversations it queues) or a memory service
(:func:`remote_access`: its URL and an API key, whose tenant and role then apply). Its user
is fixed (``--user`` or ``MEMORY_SQL_MCP_USER``) or, without one, named by every tool call.
Nothing but the protocol is written to stdout; the log goes to stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..client import MemoryClient
from ..config import MemoryConfig
from ..scope import Scope
from ..service import MemoryService
from .backends import LocalMemory, RemoteMemory
from .tools import Access, build_server


@contextmanager
def local_access(
    config: MemoryConfig,
    *,
    tenant_id: str,
    user_id: str | None,
    agent_name: str | None,
    with_worker: bool,
) -> Iterator[Access]:
    """Access to ``config``'s database for ``tenant_id``, for as long as the block runs."""
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    service = MemoryService(config, start=with_worker)
    try:
        yield Access(
            LocalMemory(service, scope.tenant_id),
            user_id=None if user_id is None else scope.user_id,
            agent_name=scope.agent_name,
        )
    finally:
        service.close()


@contextmanager
def remote_access(
    url: str,
    *,
    api_key: str | None,
    tenant_id: str | None,
    user_id: str | None,
    agent_name: str | None,
) -> Iterator[Access]:
    """Access to the memory service at ``url`` with ``api_key`` (``tenant_id``: for an
    operator key only)."""
    scope = Scope.of(user_id=user_id, agent_name=agent_name)
    with MemoryClient(url, api_key=api_key, tenant=tenant_id) as client:
        yield Access(
            RemoteMemory(client),
            user_id=None if user_id is None else scope.user_id,
            agent_name=scope.agent_name,
        )


def serve_stdio(access: Access) -> None:
    """Serve the MCP server on stdin/stdout until the client closes them."""
    build_server(lambda _ctx: access, fixed_user=access.user_id).run("stdio")


__all__ = ["local_access", "remote_access", "serve_stdio"]
