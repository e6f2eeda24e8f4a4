"""What the data commands (``facts``, ``report``, ``export``/``import``/``forget``) share: the
SQL storage they open, their scope options, and JSON output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from ..migrations import open_engine
from ..storage import SQLStorage
from ._common import database_url, load_config

UserOption = Annotated[str, typer.Option("--user", help="The user whose memory it is.")]
AgentOption = Annotated[
    str | None,
    typer.Option("--agent", help="The agent's name (default: the memory of unnamed agents)."),
]
TenantOption = Annotated[
    str | None, typer.Option("--tenant", help="The tenant (default: 'default').")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@contextmanager
def sql_storage(
    url: str | None, config: Path | None = None, *, create: bool = False
) -> Iterator[SQLStorage]:
    """The SQL store at ``--url`` (else the ``storage`` of ``--config``, else
    ``$MEMORY_SQL_DATABASE_URL``, else the default SQLite file), at the schema head.

    A missing SQLite file is refused unless ``create`` (commands that write: see
    :func:`~memory_sql.cli._common.database_url`); those also bring a new SQLite database to
    the schema head (:func:`~memory_sql.migrations.prepare_schema`).

    Raises:
        SchemaOutOfDateError: the schema is not at head (the message names
            ``memory-sql db upgrade``).
        StorageError: the SQLite file does not exist and ``create`` is false.
        ValueError: the storage is not a SQL database URL.
    """
    target = url
    if config is not None:
        loaded = load_config(config)  # read even beside --url: a broken file is an error
    if target is None and config is not None:
        if loaded.storage_class:
            raise ValueError(
                f"storage use: {loaded.storage_class} is not a SQL database; "
                "these commands need sqlite:///… or postgresql+psycopg://…"
            )
        target = loaded.storage
    if target is not None and "://" not in target and not target.startswith("sqlite:"):
        raise ValueError(
            f"{target!r} is not a database URL; these commands need sqlite:///… or "
            "postgresql+psycopg://…"
        )
    # A new SQLite file gets the schema only from a command that writes.
    engine = open_engine(database_url(target, create=create), create=create)
    try:
        storage = SQLStorage(engine)
        try:
            yield storage
        finally:
            storage.close()
    finally:
        engine.dispose()


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (plain text: no colour, no wrapping)."""
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
