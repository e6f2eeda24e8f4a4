"""``memory-sql serve`` (the HTTP service) and ``memory-sql keys`` (its API keys)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from sqlalchemy.engine import Engine

from ..errors import ConfigError
from ..migrations import open_engine
from ..server import keys as api_keys
from ._common import (
    ConfigOption,
    UrlOption,
    app,
    command,
    database_url,
    group,
    lit,
    load_config,
    out,
)
from ._data import print_json

keys_app = group(help="API keys of the HTTP service: each bound to one tenant and a role.")
app.add_typer(keys_app, name="keys")


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
        from ..server.requests import RequestIdFilter
    except ImportError as exc:
        raise ConfigError(
            f"the HTTP service needs the server extra ({exc.name} is missing): "
            "pip install 'memory-sql[server]'"
        ) from None
    settings = load_config(config, url)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
    logging.getLogger("alembic").setLevel(logging.WARNING)  # /readyz reads the revision
    uvicorn.run(
        create_app(settings, with_worker=with_worker),
        host=host,
        port=port,
        log_level=log_level.lower(),
        access_log=False,  # the service logs each request itself, with its id
        log_config=None,
    )


RoleOption = Annotated[
    str, typer.Option("--role", help="read, write or admin (each includes the one before).")
]


@command(keys_app, "create")
def keys_create(
    tenant: Annotated[
        str,
        typer.Option(
            "--tenant", help=f"The tenant the key acts for ({api_keys.OPERATOR_TENANT}: any)."
        ),
    ],
    role: RoleOption = "write",
    description: Annotated[
        str | None, typer.Option("--description", help="What the key is for.")
    ] = None,
    url: UrlOption = None,
) -> None:
    """Make an API key and print its secret, once: it is not stored and cannot be shown again.

    Example:
        memory-sql keys create --tenant acme --role write --description "chat backend"
    """
    engine = _engine(url)
    try:
        key, secret = api_keys.create_key(
            engine, tenant_id=tenant, role=role, description=description
        )
    finally:
        engine.dispose()
    out.print(
        f"created key {key.key_id} ({key.role}) for tenant {lit(key.tenant_id)}; "
        "its secret (shown once):",
        highlight=False,
        soft_wrap=True,
    )
    typer.echo(secret)


@command(keys_app, "list")
def keys_list(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    url: UrlOption = None,
) -> None:
    """List API keys (never their secrets), revoked ones too.

    Example:
        memory-sql keys list --tenant acme
    """
    engine = _engine(url, create=False)
    try:
        found = api_keys.list_keys(engine, tenant_id=tenant)
    finally:
        engine.dispose()
    if as_json:
        print_json([key.to_dict() for key in found])
        return
    if not found:
        out.print("no API keys")
        return
    for key in found:
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "live"
        used = f"used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
        out.print(
            f"{key.key_id}  {lit(key.tenant_id)}  {key.role:<5}  {state}, {used}"
            + (f"  {lit(key.description)}" if key.description else ""),
            highlight=False,
            soft_wrap=True,
        )


@command(keys_app, "revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (see `keys list`).")],
    url: UrlOption = None,
) -> None:
    """Revoke an API key: from now on its requests get 401.

    Example:
        memory-sql keys revoke 3f2a9c41d7e05b18
    """
    engine = _engine(url, create=False)
    try:
        key = api_keys.revoke_key(engine, key_id)
    finally:
        engine.dispose()
    out.print(
        f"revoked key {key.key_id} of tenant {lit(key.tenant_id)}", highlight=False, soft_wrap=True
    )


def _engine(url: str | None, *, create: bool = True) -> Engine:
    """The database of ``--url`` at the schema head (a new SQLite file gets it when ``create``)."""
    return open_engine(database_url(url, create=create), create=create)
