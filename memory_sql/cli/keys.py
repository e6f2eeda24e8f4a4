"""``memory-sql keys``: the HTTP service's API keys, each bound to one tenant and a role."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.engine import Engine

from ..migrations import open_engine
from ..server import keys as api_keys
from ._common import ConfigOption, UrlOption, app, command, group, lit, out, sql_database
from ._data import EveryTenantOption, print_json

keys_app = group(help="API keys of the HTTP service: each bound to one tenant and a role.")
app.add_typer(keys_app, name="keys")


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
    config: ConfigOption = None,
) -> None:
    """Make an API key and print its secret, once: it is not stored and cannot be shown again.

    Example:
        memory-sql keys create --tenant acme --role write --description "chat backend"
    """
    engine = _engine(url, config)
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
    tenant: EveryTenantOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """List API keys (never their secrets), revoked ones too.

    Example:
        memory-sql keys list --tenant acme
    """
    engine = _engine(url, config, create=False)
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
    rows = [
        (
            key.key_id,
            key.tenant_id,
            key.role,
            f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "live",
            f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never",
            key.description or "",
        )
        for key in found
    ]
    header = ("key id", "tenant", "role", "state", "last used (UTC)", "description")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]

    def line(cells: tuple[str, ...]) -> str:
        pairs = zip(cells[:-1], widths, strict=True)
        padded = [lit(cell) + " " * (width - len(cell)) for cell, width in pairs]
        return "  ".join([*padded, lit(cells[-1])]).rstrip()

    out.print(f"[bold]{line(header)}[/bold]", highlight=False, soft_wrap=True)
    for row in rows:
        out.print(line(row), highlight=False, soft_wrap=True)


@command(keys_app, "revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (see `keys list`).")],
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Revoke an API key: from now on its requests get 401.

    Example:
        memory-sql keys revoke 3f2a9c41d7e05b18
    """
    engine = _engine(url, config, create=False)
    try:
        key = api_keys.revoke_key(engine, key_id)
    finally:
        engine.dispose()
    out.print(
        f"revoked key {key.key_id} of tenant {lit(key.tenant_id)}", highlight=False, soft_wrap=True
    )


def _engine(url: str | None, config: Path | None, *, create: bool = True) -> Engine:
    """The command's database (``--url``, ``--config``: see
    :func:`~memory_sql.cli._common.read_config`) at the schema head (a new SQLite file gets it
    when ``create``)."""
    return open_engine(sql_database(config, url, create=create), create=create)
