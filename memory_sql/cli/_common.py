"""What every ``memory-sql`` command shares: the app, consoles, options, error handling."""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core
from rich.columns import Columns
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from sqlalchemy.engine import URL

from ..config import MemoryConfig
from ..database import URL_ENV, create_engine, resolve_url
from ..errors import MemorySQLError, StorageError
from ..migrations import ensure_at_head
from ..storage.dialects import database_file


class _Conventions:
    """What every ``memory-sql`` command and group shows the same way in every Typer version:
    a required argument as ``FILE`` in the usage line (not ``{file}``), no value type beside a
    flag (``--json``, not ``--json <bool>``), and help text that is wrapped, never cut short
    with ``…`` (a URL or a variable name longer than its column is folded whole)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with _folding_help():
            super().format_help(ctx, formatter)  # type: ignore[misc]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)  # type: ignore[misc]
        return [_usage_piece(piece) for piece in pieces]

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class _FoldingColumns(Columns):
    """Rich's :class:`~rich.columns.Columns` whose texts fold a word too long for their
    column instead of ending it with ``…`` (Typer draws each option's help as one)."""

    def __init__(self, renderables: Any = None, *args: Any, **kwargs: Any) -> None:
        items = list(renderables or ())
        for item in items:
            if isinstance(item, Text):
                item.overflow = "fold"
        super().__init__(items, *args, **kwargs)


@contextmanager
def _folding_help() -> Iterator[None]:
    """Typer's option help drawn with :class:`_FoldingColumns` while in the block."""
    try:
        from typer import rich_utils
    except ImportError:  # Typer without Rich: plain help, nothing is cut
        yield
        return
    if getattr(rich_utils, "Columns", None) is not Columns:  # a Typer that draws it otherwise
        yield
        return
    rich_utils.Columns = _FoldingColumns  # type: ignore[misc]
    try:
        yield
    finally:
        rich_utils.Columns = Columns  # type: ignore[misc]


def _usage_piece(piece: str) -> str:
    required = re.fullmatch(r"\{(\w+)\}(\.\.\.)?", piece)
    if required:
        return required[1].upper() + (required[2] or "")
    optional = re.fullmatch(r"\[(\w+)\](\.\.\.)?", piece)
    if optional:
        return f"[{optional[1].upper()}]{optional[2] or ''}"
    return piece


class Command(_Conventions, typer.core.TyperCommand):
    """A ``memory-sql`` command (see :class:`_Conventions`)."""


class Group(_Conventions, typer.core.TyperGroup):
    """A ``memory-sql`` group of commands (see :class:`_Conventions`)."""


def group(name: str | None = None, help: str | None = None) -> typer.Typer:
    """A Typer app for the ``memory-sql`` commands or one group of them: help as Rich text in
    every Typer version, ``--help`` when no command is given, no tracebacks."""
    return typer.Typer(
        name=name,
        help=help,
        cls=Group,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )


app = group("memory-sql", "Long-term memory for LLM agents, stored in PostgreSQL or SQLite.")

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def lit(value: object) -> str:
    """``value`` as literal text inside a Rich markup string.

    Every CLI message is Rich markup (``[red]error:[/red] …``), so any text in it that was not
    written here — an id, an agent or category name, a file name, a URL, a fact, the message
    of an exception — passes through ``lit``: ``[/]``, ``[red]x`` or ``[bold]x[/bold]`` is
    then printed as typed, never read as a tag (nor failing as an unmatched one).
    """
    return escape(str(value))


def plural(count: int, noun: str) -> str:
    """``1 fact``, ``2 facts``; ``1 memory``, ``3 memories``."""
    if count == 1:
        return f"{count} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return f"{count} {noun[:-1]}ies"
    return f"{count} {noun}s"


def help_text(doc: str | None) -> str:
    """A command's docstring as its ``--help`` text: each paragraph on one line, for the
    terminal to wrap at its width (a docstring's own line breaks would otherwise show as
    stray breaks), except a paragraph headed ``Example:`` whose indented lines are commands,
    kept one per line, indented and in bold."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc or "").split("\n\n"):
        head, *rest = paragraph.splitlines()
        if rest and head.endswith(":") and all(line.startswith(" ") for line in rest):
            # The markup tag first: Typer dedents help text, and would drop plain indentation.
            lines = [f"[bold]  {lit(line.strip())}[/bold]" for line in rest]
            paragraphs.append("\n".join([head, *lines]))
        else:
            paragraphs.append(" ".join(line.strip() for line in paragraph.splitlines()))
    return "\n\n".join(paragraphs)


def version() -> str:
    """The installed distribution's version (``memory-sql 0.1.0``)."""
    try:
        return f"memory-sql {metadata.version('memory-sql')}"
    except metadata.PackageNotFoundError:
        return "memory-sql (not installed: a source checkout)"


def _show_version(shown: bool) -> None:
    if shown:
        typer.echo(version())
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Long-term memory for LLM agents, stored in PostgreSQL or SQLite."""


def command(group: typer.Typer, name: str) -> Callable[[F], F]:
    """Register a command whose expected failures print one red line and exit 1 (usage errors
    stay Typer's: its panel, exit 2), with :func:`help_text` of its docstring as help."""

    def register(function: F) -> F:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            _follow_terminal_width()
            try:
                return function(*args, **kwargs)
            except (MemorySQLError, ValueError, OSError) as exc:
                err.print(f"[red]error:[/red] {lit(message(exc))}", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None

        group.command(name, cls=Command, help=help_text(function.__doc__))(run)
        return function

    return register


def _follow_terminal_width() -> None:
    """``$COLUMNS`` as it is when a command runs, not as it was when the consoles were made
    (at import): else a program that imports the CLI first and sets the width later, a test
    runner among them, gets the width of whoever imported it first. Output to a file or a
    pipe is not wrapped at that width: a line a program reads stays one line."""
    columns = os.environ.get("COLUMNS", "").strip()
    width = int(columns) if columns.isdigit() and int(columns) > 0 else None
    for console in (out, err):
        console.width = width  # type: ignore[assignment]  (None: the terminal's own)
        # To a file or a pipe, lines are never broken (tables still fit the width).
        console.soft_wrap = not console.is_terminal


def message(exc: BaseException) -> str:
    """What an error line says about ``exc``: its message, on one line; a file-system error
    as ``FILE: reason`` (``memory.json: No such file or directory``), not Python's
    ``[Errno 2] …`` form."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{os.fsdecode(exc.filename)}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split()) if "\n" in text else text


CONFIG_ENV = "MEMORY_SQL_CONFIG"

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        help="Database URL (sqlite:///file.db or postgresql+psycopg://user@host/db); wins over "
        "the config file's storage. Default: the config's storage, else sqlite:///memory_sql.db "
        "in the working directory.",
        show_default=False,
    ),
]

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar=CONFIG_ENV,
        help="A YAML file with a `memory:` section (MemoryConfig); MEMORY_SQL_* variables "
        "override it.",
        show_default=False,
    ),
]


def read_config(config: Path | None, url: str | None = None) -> MemoryConfig:
    """The settings every command starts from, and the one rule for finding the database.

    The database is, the first that gives one: ``--url`` (or ``$MEMORY_SQL_DATABASE_URL``),
    then ``$MEMORY_SQL_STORAGE``, then the ``storage`` of ``--config`` (or of the file
    ``$MEMORY_SQL_CONFIG`` names), then ``sqlite:///memory_sql.db`` in the working directory.
    Every command that opens a database (``serve``, ``worker``, ``keys``, ``db``, ``facts``,
    ``queue``, …) resolves it here, so a key made with ``keys create --config X`` lands where
    ``serve --config X`` looks for it.
    """
    loaded = MemoryConfig.from_yaml(config) if config is not None else MemoryConfig.from_env()
    if url is not None:
        loaded = loaded.model_copy(update={"storage": url})
    return loaded


def load_config(
    config: Path | None, url: str | None = None, *, create: bool = True
) -> MemoryConfig:
    """:func:`read_config`; with ``create=False`` (a command that only reads) a SQL storage
    also passes through :func:`database_url`, so that a SQLite file that does not exist is an
    error, and its schema is checked to be at head: such a command never gives a new (empty)
    SQLite database the schema, as a service opening it would.
    """
    loaded = read_config(config, url)
    target = loaded.storage
    if not create and not loaded.storage_class and _is_url(target):
        engine = create_engine(database_url(target, create=False))
        try:
            ensure_at_head(engine)
        finally:
            engine.dispose()
    return loaded


def sql_database(config: Path | None, url: str | None, *, create: bool) -> URL:
    """The SQL database of :func:`read_config`, through :func:`database_url`.

    Raises:
        ValueError: the storage is a folder or a storage class, not a SQL database.
        StorageError: ``create`` is false and the SQLite file does not exist.
    """
    loaded = read_config(config, url)
    if loaded.storage_class:
        raise ValueError(
            f"storage use: {loaded.storage_class} is not a SQL database; "
            "this command needs sqlite:///… or postgresql+psycopg://…"
        )
    if not _is_url(loaded.storage):
        raise ValueError(
            f"{loaded.storage!r} is not a database URL; this command needs sqlite:///… or "
            "postgresql+psycopg://…"
        )
    return database_url(loaded.storage, create=create)


def _is_url(target: str) -> bool:
    return "://" in target or target.startswith("sqlite:")


def database_url(target: str | URL | None, *, create: bool) -> URL:
    """The database a command opens: ``target`` (see :func:`read_config` for where it comes
    from), checked.

    Every command's database passes here before an engine is made. Only commands that write
    (``create=True``: ``db upgrade``, ``ingest``, ``import``, ``facts add``, …) may let SQLite
    create a missing file; for the others a SQLite file that does not exist is an error naming
    it, and no empty database is left behind.

    Raises:
        StorageError: ``create`` is false and the SQLite file does not exist.
        ValueError: not a supported database URL.
    """
    resolved = resolve_url(target)
    path = sqlite_file(resolved)
    if not create and path is not None and not path.exists():
        raise StorageError(
            f"no database at {path}: the SQLite file does not exist (this command does not "
            "create one; `memory-sql db upgrade` does)"
        )
    return resolved


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL opens (``sqlite:///path.db``, or ``sqlite:///file:path?uri=true``),
    ``None`` for an in-memory database or another backend."""
    database = database_file(url)
    return None if database is None else Path(database)
