"""``memory-sql db``: create, inspect and check the schema (Alembic); purge closed facts;
scrub stored secrets."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from .. import migrations
from ..database import create_engine, redacted
from ..errors import MemorySQLError
from ..intake.redact import redactor_of
from ..models import utcnow
from ..scope import Scope
from ..storage import SQLStorage
from ..storage.redactions import record_redactions
from ..storage.scrub import BATCH_ROWS, scrub
from ._common import (
    ConfigOption,
    UrlOption,
    app,
    command,
    err,
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
        days = read_config(config, url).retention.closed_fact_days
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


@command(db_app, "scrub")
def db_scrub(
    url: UrlOption = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Count the secrets stored; change nothing."),
    ] = False,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's.", show_default=False)
    ] = None,
    batch_rows: Annotated[
        int, typer.Option("--batch-rows", min=1, max=100_000, help="Rows per transaction.")
    ] = BATCH_ROWS,
    config: ConfigOption = None,
) -> None:
    """Find secrets already stored and replace them with typed placeholders.

    Facts (live and past versions), fact events, sections, queue rows, memory-LLM call errors:
    read in batches, each its own transaction; a row is written only if a secret was found, so
    a second run finds nothing. Prints how many rows changed per table and secrets per kind
    (never the secrets). Use the redaction settings of the config (extra patterns, allow-list).

    Example:
        memory-sql db scrub --dry-run --url sqlite:///memory_sql.db
    """
    if tenant is not None:
        Scope.of(tenant_id=tenant)  # a clear error for a malformed tenant
    settings = read_config(config, url)
    redactor = redactor_of(settings)
    if not redactor.enabled:
        raise MemorySQLError("redaction is off (redaction: off): nothing to scrub with")
    engine = create_engine(sql_database(config, url, create=False))
    try:
        result = scrub(
            engine, redactor.redact, dry_run=dry_run, tenant_id=tenant, batch_rows=batch_rows
        )
        if not dry_run and result.by_tenant:
            with engine.begin() as conn:
                for tenant_id in sorted({t for t, _ in result.by_tenant}):
                    counts = {k: n for (t, k), n in result.by_tenant.items() if t == tenant_id}
                    record_redactions(conn, tenant_id, "scrub", counts)
    finally:
        engine.dispose()
    verb = "would redact" if dry_run else "redacted"
    out.print(
        f"{lit(redacted(engine.url))}: {verb} {plural(result.secrets, 'secret')}",
        highlight=False,
        soft_wrap=True,
    )
    for table, rows in result.rows.items():
        if rows:
            out.print(f"  {table}: {plural(rows, 'row')}", highlight=False)
    for kind, number in sorted(result.kinds.items()):
        out.print(f"  {kind}: {number}", highlight=False)
    if result.closed_duplicates:
        out.print(
            f"  {plural(result.closed_duplicates, 'live fact')} closed: a duplicate once redacted",
            highlight=False,
        )


@command(db_app, "embed")
def db_embed(url: UrlOption = None, config: ConfigOption = None) -> None:
    """Embed every live fact that lacks a vector of the configured embedding model.

    Uses embedding_base_url and embedding_model (MEMORY_SQL_EMBEDDING_BASE_URL, …), in batches
    of embedding_batch_size, with a progress bar. Resumable: stopped halfway, it embeds only
    what is still missing when run again. Exits 0 when no fact is left without a vector.

    Example:
        memory-sql db embed --url sqlite:///memory_sql.db
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from ..embeddings import Embedder
    from ..storage.vectors import FactVectors
    from ..update.embedding import EmbeddingPass

    settings = read_config(config, url)
    embedder = Embedder.from_config(settings)
    if embedder is None:
        raise MemorySQLError(
            "no embedding endpoint configured: set embedding_base_url and embedding_model "
            "(MEMORY_SQL_EMBEDDING_BASE_URL, MEMORY_SQL_EMBEDDING_MODEL)"
        )
    engine = create_engine(sql_database(config, url, create=False), statement_timeout=None)
    try:
        migrations.ensure_at_head(engine)
        vectors = FactVectors(engine, embedder.key)
        missing = vectors.count_unembedded()
        with Progress(
            TextColumn("embedding facts"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            transient=True,
        ) as progress:
            task = progress.add_task("embed", total=missing)
            embedded = EmbeddingPass(embedder, vectors).embed_all(
                lambda count: progress.advance(task, count)
            )
        left = vectors.count_unembedded()
    finally:
        embedder.close()
        engine.dispose()
    out.print(
        f"{lit(redacted(engine.url))}: embedded {plural(embedded, 'fact')} with "
        f"{lit(embedder.key)}; {plural(left, 'fact')} left without a vector",
        highlight=False,
        soft_wrap=True,
    )
    if left:
        raise typer.Exit(1)
