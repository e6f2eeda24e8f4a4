"""What the data commands (``facts``, ``report``, ``export``/``import``/``forget``) share: the
SQL storage they open, their scope options, and JSON output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.engine import Engine

from ..migrations import open_engine
from ..scope import Scope
from ..storage import SQLStorage
from ..storage.users import other_tenants as other_tenants
from ._common import err, lit, sql_database

UserOption = Annotated[str, typer.Option("--user", help="The user whose memory it is.")]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", help="The agent's name (default: the memory of unnamed agents)."),
]
TenantOption = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        help="The tenant of the user (default: 'default', in every command that names a "
        "user; a read that finds nothing there names the tenants holding the user).",
        show_default=False,
    ),
]
EveryTenantOption = Annotated[
    str | None,
    typer.Option("--tenant", help="Only this tenant (default: every tenant).", show_default=False),
]
EveryAgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="Only this agent's ('-': the unnamed agents'; default: every agent).",
        show_default=False,
    ),
]


def listed_agent(agent: str | None) -> str | None:
    """``--agent`` of a listing as the library takes it: ``-`` (the unnamed agents') is ``""``."""
    return "" if agent == "-" else agent


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@contextmanager
def sql_storage(
    url: str | None, config: Path | None = None, *, create: bool = False
) -> Iterator[SQLStorage]:
    """The SQL store of the command's database (:func:`~memory_sql.cli._common.read_config`
    says which), at the schema head.

    A missing SQLite file is refused unless ``create`` (commands that write: see
    :func:`~memory_sql.cli._common.database_url`); those also bring a new SQLite database to
    the schema head (:func:`~memory_sql.migrations.prepare_schema`).

    Raises:
        SchemaOutOfDateError: the schema is not at head (the message names
            ``memory-sql db upgrade``).
        StorageError: the SQLite file does not exist and ``create`` is false.
        ValueError: the storage is not a SQL database URL.
    """
    # A new SQLite file gets the schema only from a command that writes.
    engine = open_engine(sql_database(config, url, create=create), create=create)
    try:
        storage = SQLStorage(engine)
        try:
            yield storage
        finally:
            storage.close()
    finally:
        engine.dispose()


def note_other_tenants(engine: Engine, scope: Scope, tenant: str | None) -> None:
    """The CLI's tenant rule, for a read of one user that found nothing: without ``--tenant``
    (``tenant`` None) it looked in ``default``; say so, and name the tenants that do hold the
    user (data written through the HTTP API lives in the tenant of its key)."""
    if tenant is not None:
        return
    found = other_tenants(engine, scope)
    if not found:
        return
    names = ", ".join(found[:10]) + (", …" if len(found) > 10 else "")
    err.print(
        f"[yellow]note:[/yellow] without --tenant this is tenant {lit(scope.tenant_id)}; "
        f"user {lit(scope.user_id)} has memories in tenant {lit(names)} "
        f"(pass --tenant {lit(found[0])})",
        highlight=False,
        soft_wrap=True,
    )


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (plain text: no colour, no wrapping)."""
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
