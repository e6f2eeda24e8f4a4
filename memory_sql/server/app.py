"""The FastAPI application: ``create_app(config)``, served by ``memory-sql serve``.

Routes are plain ``def`` functions (but the import, which awaits its body first): FastAPI runs
them in its thread pool, as the library is synchronous. ``/mcp`` serves the MCP
server (:mod:`memory_sql.mcp.http`, built at its first request: :mod:`.mcp_mount`) with the
same keys. The
:class:`~memory_sql.server.state.ServerState` is built when the application starts (so
building the app touches no database) and closed when it stops.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import Route

from ..config import MemoryConfig
from . import console, docs, errors
from .mcp_mount import PATH as MCP_PATH
from .mcp_mount import LazyMcp
from .metrics import Metrics
from .request_log import RequestLog
from .requests import RequestMiddleware
from .routes import conversations, facts, memory, operations, queue, reports
from .state import ServerState

logger = logging.getLogger("memory_sql.server")

API_VERSION = "v1"


def create_app(config: MemoryConfig | None = None, *, with_worker: bool = True) -> FastAPI:
    """The service's application for ``config`` (default :meth:`MemoryConfig.from_env`);
    ``with_worker`` also runs the memory updates in this process."""
    config = config if config is not None else MemoryConfig.from_env()
    metrics = Metrics()

    mcp = LazyMcp(lambda: app.state.memory)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.memory = ServerState.open(config, metrics, with_worker=with_worker)
        logger.info("memory_sql service ready (worker %s)", "on" if with_worker else "off")
        try:
            async with mcp.running():
                yield
        finally:
            app.state.memory.close()

    app = FastAPI(
        title="memory_sql",
        version=API_VERSION,
        summary="Long-term memory for LLM agents, per tenant, on PostgreSQL or SQLite.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app)
    docs.install(app)
    app.state.request_log = RequestLog()
    app.add_middleware(
        RequestMiddleware,
        max_body_bytes=config.server.max_body_bytes,
        metrics=metrics,
        body_timeout=config.server.body_timeout_seconds,
        request_log=app.state.request_log,
    )
    for module in (operations, conversations, memory, facts, queue, reports):
        app.include_router(module.router)
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]))
    console.install(app)
    return app
