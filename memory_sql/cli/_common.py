"""What every ``memory-sql`` command shares: the app, consoles, options, error handling."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from ..config import MemoryConfig
from ..database import URL_ENV
from ..errors import MemorySQLError

app = typer.Typer(
    name="memory-sql",
    help="Long-term memory for LLM agents, stored in PostgreSQL or SQLite.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def command(group: typer.Typer, name: str) -> Callable[[F], F]:
    """Register a command whose expected failures print one red line and exit 1."""

    def register(function: F) -> F:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except (MemorySQLError, ValueError, OSError) as exc:
                err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None

        group.command(name)(run)
        return function

    return register


UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        help="Database URL (sqlite:///file.db or postgresql+psycopg://user@host/db). "
        "Default: sqlite:///memory_sql.db in the working directory.",
        show_default=False,
    ),
]

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A YAML file with a `memory:` section (MemoryConfig); MEMORY_SQL_* variables "
        "override it.",
        show_default=False,
    ),
]


def load_config(config: Path | None, url: str | None = None) -> MemoryConfig:
    """The configuration from ``--config`` (or the environment), with ``--url`` as storage."""
    loaded = MemoryConfig.from_yaml(config) if config is not None else MemoryConfig.from_env()
    if url is not None:
        loaded = loaded.model_copy(update={"storage": url})
    return loaded
