"""``memory-sql serve``: the HTTP service (:mod:`memory_sql.server`)."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from ..database import redacted
from ..errors import ConfigError
from ._common import (
    ConfigOption,
    UrlOption,
    app,
    command,
    load_config,
)


@command(app, "serve")
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port.")] = 8080,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--with-worker/--no-worker",
            help="Also run the memory updates in this process (else run `memory-sql worker`).",
        ),
    ] = True,
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error.")
    ] = "info",
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs) until SIGTERM or Ctrl-C.

    Every request needs an API key (`memory-sql keys create`) and acts for its
    tenant. Needs the package's server extra (FastAPI, uvicorn, prometheus-client).

    Example:
        memory-sql serve --url postgresql://memory_app@127.0.0.1/memory --port 8080
    """
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"--log-level must be debug, info, warning or error, not {log_level!r}")
    try:
        import uvicorn

        from ..server.app import create_app
        from ..server.logs import RateLimitFilter
        from ..server.logs import configure as configure_logging
        from ..server.protocol import guarded_protocol
        from ..server.requests import RequestIdFilter
        from ..server.state import ServerState
    except ImportError as exc:
        raise ConfigError(
            f"the HTTP service needs the server extra ({exc.name} is missing): "
            "from the clone, pip install -e '.[server]' (or make demo)"
        ) from None
    settings = load_config(config, url)
    _check_port(host, port)  # before the worker starts: a busy port is one error line
    ServerState.check(settings)  # a database that is not ready: one line, exit 1
    handler = configure_logging(
        level, settings.server.log_format, third_party=settings.server.log_third_party
    )
    handler.addFilter(RequestIdFilter())
    handler.addFilter(RateLimitFilter())
    logging.getLogger("alembic").setLevel(logging.WARNING)  # /readyz reads the revision
    logging.getLogger("memory_sql.server").info(
        "serving database %s on http://%s:%d (%s)",
        redacted(settings.storage),
        host,
        port,
        "updates run in this process" if with_worker else "no worker: run `memory-sql worker`",
    )
    with _signals_end_the_server_only():
        uvicorn.run(
            create_app(settings, with_worker=with_worker),
            host=host,
            port=port,
            log_level=log_level.lower(),
            access_log=False,  # the service logs each request itself, with its id
            log_config=None,
            http=guarded_protocol(settings.server.header_timeout_seconds),
            # uvicorn types it int, but uses it as asyncio's float delay.
            timeout_keep_alive=settings.server.keep_alive_seconds,  # type: ignore[arg-type]
            # uvicorn refuses a request once its connections, the request's own counted, reach
            # limit_concurrency: + 1 serves server_max_connections connections, 503 past them.
            limit_concurrency=settings.server.max_connections + 1,
            h11_max_incomplete_event_size=settings.server.max_header_bytes,
            timeout_graceful_shutdown=30,
        )


def _check_port(host: str, port: int) -> None:
    """Raise :class:`ConfigError` naming ``host:port`` if it cannot be listened on now (as
    uvicorn binds it: address reuse on, so a port in TIME_WAIT is not refused)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (another process "
                "uses the port? stop it or choose another --port)"
            ) from None


@contextmanager
def _signals_end_the_server_only() -> Iterator[None]:
    """SIGTERM and SIGINT stop the server (uvicorn's own handlers, installed while it runs),
    and nothing more: uvicorn raises the signal again once it has shut down, which would end
    the process by the signal (exit -15, 143 in a container) after a clean shutdown. Here that
    second delivery is ignored, and ``serve`` returns: exit 0."""
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda _number, _frame: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
