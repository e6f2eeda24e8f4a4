"""``memory-sql mcp``: the MCP server over stdio (:mod:`memory_sql.mcp.stdio`)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from ..errors import ConfigError
from ._common import ConfigOption, UrlOption, app, command, load_config


@command(app, "mcp")
def mcp(
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            envvar="MEMORY_SQL_MCP_USER",
            help="The user whose memory the tools reach (else every tool call names one).",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            envvar="MEMORY_SQL_MCP_AGENT",
            help="The agent whose memory a tool call reaches when it names none.",
            show_default=False,
        ),
    ] = None,
    service: Annotated[
        str | None,
        typer.Option(
            "--service",
            envvar="MEMORY_SQL_SERVICE_URL",
            help="A memory service (memory-sql serve) to reach instead of a database: its "
            "URL, http://host:port; with --key.",
            show_default=False,
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            envvar="MEMORY_SQL_API_KEY",
            help="The service's API key (msk_…): its tenant and role apply.",
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The tenant: of the database's memories (default: default), or, with "
            "--service, the one an operator key acts for.",
            show_default=False,
        ),
    ] = None,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--with-worker/--no-worker",
            help="With a database: also learn from the conversations queued (the memory LLM "
            "of the config), as memory-sql serve does.",
        ),
    ] = True,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the MCP server on stdin/stdout, for an agent that starts it (Claude Desktop, an
    IDE): its tools read and change one user's memory.

    The memory is a database (--url, --config, as for every command; a new SQLite file is
    created with its schema) or a memory service (--service and --key). Needs the package's
    server extra (the mcp SDK).

    Example:
        memory-sql mcp --user alice --url sqlite:///memory.db
        memory-sql mcp --user alice --service http://127.0.0.1:8080 --key msk_…
    """
    try:
        from ..mcp.stdio import local_access, remote_access, serve_stdio
    except ImportError as exc:
        raise ConfigError(
            f"the MCP server needs the server extra ({exc.name} is missing): "
            "pip install 'memory-sql[server]'"
        ) from None
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if service is not None:
        if url is not None or config is not None:
            raise ValueError("give a database (--url, --config) or --service, not both")
        if not key:
            raise ValueError("--service needs an API key: --key or MEMORY_SQL_API_KEY")
        access = remote_access(
            service, api_key=key, tenant_id=tenant, user_id=user, agent_name=agent
        )
    else:
        settings = load_config(config, url)
        access = local_access(
            settings,
            tenant_id=tenant or "default",
            user_id=user,
            agent_name=agent,
            with_worker=with_worker,
        )
    with access as reached:
        serve_stdio(reached)
