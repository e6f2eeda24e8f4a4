"""``memory-sql db``: create, inspect and check the schema (Alembic); purge closed facts."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from .. import migrations
from ..database import create_engine, redacted
from ..errors import MemorySQLError
from ..models import utcnow
from ..scope import Scope
from ..storage import SQLStorage
from ._common import (
    ConfigOption,
    UrlOption,
    app,
    command,
    group,
    lit,
    out,
    plural,
    read_config,
    sql_database,
)

db_app = group(help="Create and check the database schema (Alembic).")
app.add_typer(db_app, name="db")


@command(db_app, "upgrade")
def db_upgrade(
    url: UrlOption = None,
    revision: Annotated[
        str,
        typer.Option(
            "--revision",
            help="Migrate up to this revision: 'head' (the newest), or a revision id "
            "(0001, 0002, …; see `memory-sql db current`).",
        ),
    ] = "head",
    text_search_config: Annotated[
        str | None,
        typer.Option(
            "--text-search-config",
            help="PostgreSQL: the text search configuration of the facts' full-text index, "
            "when revision 0011 makes it (default simple: terms are normalised for every "
            "language before they reach it).",
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Create or migrate the schema up to REVISION (default: the newest).

    Example:
        memory-sql db upgrade --url postgresql+psycopg://postgres@127.0.0.1/memory
    """
    engine = create_engine(sql_database(config, url, create=True), statement_timeout=None)
    try:
        before = migrations.current_revision(engine)
        migrations.upgrade(engine, revision, text_search_config=text_search_config)
        after = migrations.current_revision(engine)
    finally:
        engine.dispose()
    where = lit(redacted(engine.url))
    if before == after:
        out.print(f"{where}: already at revision {after}", highlight=False, soft_wrap=True)
    else:
        out.print(
            f"{where}: upgraded from {before or 'an empty database'} to {after}",
            highlight=False,
            soft_wrap=True,
        )


@command(db_app, "current")
def db_current(url: UrlOption = None, config: ConfigOption = None) -> None:
    """Print the database's schema revision and the newest one this version knows.

    Example:
        memory-sql db current --url sqlite:///memory_sql.db
    """
    engine = create_engine(sql_database(config, url, create=False), statement_timeout=None)
    try:
        current = migrations.current_revision(engine)
    finally:
        engine.dispose()
    head = migrations.head_revision()
    state = "up to date" if current == head else "run `memory-sql db upgrade`"
    out.print(
        f"{lit(redacted(engine.url))}: revision {current or 'none'} (head {head}, {state})",
        highlight=False,
        soft_wrap=True,
    )


@command(db_app, "check")
def db_check(url: UrlOption = None, config: ConfigOption = None) -> None:
    """Exit 0 if the database is at head and its tables match the models, else 1.

    Example:
        memory-sql db check --url postgresql+psycopg://postgres@127.0.0.1/memory
    """
    engine = create_engine(sql_database(config, url, create=False), statement_timeout=None)
    try:
        migrations.ensure_at_head(engine)
        drift = migrations.check(engine)
    finally:
        engine.dispose()
    if drift:
        raise MemorySQLError(f"the tables differ from the models: {drift}")
    out.print(
        f"{lit(redacted(engine.url))}: schema at head {migrations.head_revision()}, no drift",
        highlight=False,
        soft_wrap=True,
    )


@command(db_app, "grant")
def db_grant(
    role: Annotated[
        str, typer.Option("--role", help="The role the HTTP service connects as.")
    ] = "memory_app",
    apply: Annotated[
        bool, typer.Option("--apply", help="Run the statements (else print them).")
    ] = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Print (or --apply) the privileges the HTTP service's role needs on PostgreSQL.

    The role must exist, own nothing, and be no superuser (row-level security
    does not hold those): CREATE ROLE memory_app LOGIN PASSWORD '…' first.

    Example:
        memory-sql db grant --role memory_app --apply --url postgresql://postgres@127.0.0.1/memory
    """
    from ..storage.grants import apply_grants, grant_statements

    engine = create_engine(sql_database(config, url, create=False), statement_timeout=None)
    try:
        migrations.ensure_at_head(engine)
        statements = apply_grants(engine, role) if apply else grant_statements(engine, role)
    finally:
        engine.dispose()
    for statement in statements:
        typer.echo(statement + ";")
    if apply:
        out.print(f"granted to {lit(role)}", highlight=False)


@command(db_app, "purge")
def db_purge(
    url: UrlOption = None,
    older_than_days: Annotated[
        int | None,
        typer.Option(
            "--older-than-days",
            min=0,
            help="Delete closed facts (superseded or removed versions) closed more than this "
            "many days ago (default: the config's closed_fact_retention_days).",
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's.", show_default=False)
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Delete old closed facts: past versions kept for as-of reads and history.

    Live facts are never touched. The worker of `memory-sql run`/`serve` does the same in the
    background when closed_fact_retention_days is set.

    Example:
        memory-sql db purge --older-than-days 365 --url sqlite:///memory_sql.db
    """
    days = older_than_days
    if days is None:
        days = read_config(config, url).closed_fact_retention_days
        if days == 0:
            raise MemorySQLError(
                "give --older-than-days (closed_fact_retention_days is 0: keep closed facts)"
            )
    if tenant is not None:
        Scope.of(tenant_id=tenant)  # a clear error for a malformed tenant
    engine = create_engine(sql_database(config, url, create=False))
    try:
        storage = SQLStorage(engine)
        purged = storage.purge_closed(utcnow() - timedelta(days=days), tenant_id=tenant)
    finally:
        engine.dispose()
    out.print(
        f"{lit(redacted(engine.url))}: purged {plural(purged, 'closed fact')} closed more than "
        f"{plural(days, 'day')} ago",
        highlight=False,
        soft_wrap=True,
    )
