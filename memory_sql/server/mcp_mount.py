"""``/mcp``, built at its first request.

The MCP SDK takes longer to import than the rest of the service together (about 2 s of CPU on
this project's 2-core machines), so a service nobody reaches over MCP never pays for it: the
first request to ``/mcp`` imports it in a worker thread, builds
:class:`memory_sql.mcp.http.McpEndpoint` and starts its session manager in the application's
task group; every later request goes straight to that endpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from starlette.types import Receive, Scope, Send

from ..mcp import HTTP_PATH as PATH
from .state import ServerState

logger = logging.getLogger("memory_sql.server")

if TYPE_CHECKING:
    from ..mcp.http import McpEndpoint


class LazyMcp:
    """The ASGI endpoint of ``/mcp``; :meth:`running` spans the application's lifespan."""

    def __init__(self, state: Callable[[], ServerState]) -> None:
        self._state = state
        self._endpoint: McpEndpoint | None = None
        self._tasks: TaskGroup | None = None
        self._lock: anyio.Lock | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The task group the endpoint's session manager runs in, once it is built."""
        async with anyio.create_task_group() as tasks:
            self._tasks, self._lock = tasks, anyio.Lock()
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                self._tasks = self._endpoint = None

    path = PATH
    """The route template the request log and the metrics show for ``/mcp``'s requests."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("route", self)  # a plain Starlette route leaves it unset
        endpoint = self._endpoint or await self._start()
        await endpoint(scope, receive, send)

    async def _start(self) -> McpEndpoint:
        if self._tasks is None or self._lock is None:
            raise RuntimeError("/mcp is served only while the application runs")
        async with self._lock:
            if self._endpoint is None:
                started_at = time.monotonic()
                endpoint = await anyio.to_thread.run_sync(self._build)
                logger.info(
                    "MCP server built at the first request to %s (%.2f s)",
                    PATH,
                    time.monotonic() - started_at,
                )
                started = anyio.Event()
                running = False

                async def serve() -> None:
                    nonlocal running
                    try:
                        async with endpoint.running():
                            running = True
                            started.set()
                            await anyio.sleep_forever()
                    except Exception:
                        logger.exception("the MCP server's session manager stopped")
                    finally:
                        started.set()

                self._tasks.start_soon(serve)
                await started.wait()
                if not running:
                    raise RuntimeError("the MCP server could not start (see the log)")
                self._endpoint = endpoint
        return self._endpoint

    def _build(self) -> McpEndpoint:
        from ..mcp.http import McpEndpoint

        return McpEndpoint(self._state)
