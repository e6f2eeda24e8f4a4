"""The ``memory-sql`` command line: a thin skin over the library."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from . import migrations
from .database import URL_ENV, create_engine, redacted, resolve_url
from .errors import MemorySQLError
from .models import Fact, MemoryDocument
from .storage import open_storage

app = typer.Typer(
    name="memory-sql",
    help="Long-term memory for LLM agents, stored in PostgreSQL or SQLite.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Create and check the database schema (Alembic).", no_args_is_help=True)
app.add_typer(db_app, name="db")

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


@command(db_app, "upgrade")
def db_upgrade(url: UrlOption = None, revision: str = "head") -> None:
    """Create or migrate the schema up to REVISION (default: the newest).

    Example:
        memory-sql db upgrade --url postgresql+psycopg://postgres@127.0.0.1/memory
    """
    engine = create_engine(url)
    try:
        before = migrations.current_revision(engine)
        migrations.upgrade(engine, revision)
        after = migrations.current_revision(engine)
    finally:
        engine.dispose()
    where = redacted(engine.url)
    if before == after:
        out.print(f"{where}: already at revision {after}")
    else:
        out.print(f"{where}: upgraded from {before or 'an empty database'} to {after}")


@command(db_app, "current")
def db_current(url: UrlOption = None) -> None:
    """Print the database's schema revision and the newest one this version knows.

    Example:
        memory-sql db current --url sqlite:///memory_sql.db
    """
    engine = create_engine(url)
    try:
        current = migrations.current_revision(engine)
    finally:
        engine.dispose()
    head = migrations.head_revision()
    state = "up to date" if current == head else "run `memory-sql db upgrade`"
    out.print(f"{redacted(engine.url)}: revision {current or 'none'} (head {head}, {state})")


@command(db_app, "check")
def db_check(url: UrlOption = None) -> None:
    """Exit 0 if the database is at head and its tables match the models, else 1.

    Example:
        memory-sql db check --url postgresql+psycopg://postgres@127.0.0.1/memory
    """
    engine = create_engine(url)
    try:
        migrations.ensure_at_head(engine)
        drift = migrations.check(engine)
    finally:
        engine.dispose()
    if drift:
        raise MemorySQLError(f"the tables differ from the models: {drift}")
    out.print(f"{redacted(engine.url)}: schema at head {migrations.head_revision()}, no drift")


@command(app, "demo")
def demo(
    url: Annotated[
        str, typer.Option("--url", help="Where to store the demo memory.")
    ] = "sqlite:///memory_sql_demo.db",
) -> None:
    """Store a sample memory on a SQLite file, read it back, and show it.

    Example:
        memory-sql demo
    """
    engine = create_engine(url)
    try:
        migrations.upgrade(engine)
    finally:
        engine.dispose()
    scope = {"user_id": "demo-user", "agent_name": "coder"}
    with open_storage(resolve_url(url).render_as_string(hide_password=False)) as storage:
        doc = storage.load(**scope)
        doc.user.work_context.summary = "Backend engineer building data pipelines in Python."
        doc.user.top_of_mind.summary = "Moving a memory service from JSON files to PostgreSQL."
        for content, category, confidence in [
            ("Prefers concise answers with code first", "preference", 0.92),
            ("Works mostly with PostgreSQL and SQLAlchemy", "context", 0.85),
            ("喜欢用中文讨论架构设计", "preference", 0.8),
        ]:
            if all(f.key != Fact(content=content).key for f in doc.facts):
                doc.facts.append(Fact(content=content, category=category, confidence=confidence))
        version = storage.save(doc, **scope)
        stored = storage.load(**scope)
    out.print(f"Stored the memory of demo-user/coder in {redacted(resolve_url(url))}")
    out.print(f"version {version}; loaded back: {_describe(stored)}")
    table = Table("category", "confidence", "fact")
    for fact in sorted(stored.facts, key=lambda f: -f.confidence):
        table.add_row(fact.category, f"{fact.confidence:.2f}", fact.content)
    out.print(table)
    out.print_json(json.dumps(stored.to_deerflow(), ensure_ascii=False))


def _describe(doc: MemoryDocument) -> str:
    sections = sum(1 for s in doc.sections().values() if s.summary)
    return f"{sections} sections, {len(doc.facts)} facts"


def main() -> None:
    """Entry point of the ``memory-sql`` script."""
    app()
