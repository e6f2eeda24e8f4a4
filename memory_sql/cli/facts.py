"""``memory-sql facts list | add | remove | search``: read and change facts by hand."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from .. import ops
from ..ops import FactRecord
from ..scope import Scope
from ._common import ConfigOption, UrlOption, app, command, group, lit, out, plural
from ._data import (
    AgentOption,
    EveryAgentOption,
    EveryTenantOption,
    JsonOption,
    TenantOption,
    UserOption,
    listed_agent,
    note_other_tenants,
    print_json,
    sql_storage,
)

facts_app = group(help="List, add, remove and search facts.")
app.add_typer(facts_app, name="facts")


@command(facts_app, "list")
def facts_list(
    user: UserOption,
    agent: AgentOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """List the facts of one memory, highest confidence first.

    Example:
        memory-sql facts list --user alice --agent coder --url sqlite:///memory.db
    """
    scope = Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)
    with sql_storage(url, config) as storage:
        doc = storage.load(user_id=user, agent_name=agent, tenant_id=tenant)
        if doc.version == 0:
            note_other_tenants(storage.engine, scope, tenant)
    records = [
        FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, fact)
        for fact in sorted(doc.facts, key=lambda f: (-f.confidence, f.created_at, f.id))
    ]
    if as_json:
        print_json([record.to_dict() for record in records])
        return
    _print_facts(records, title=f"{lit(scope)}: version {doc.version}", with_scope=False)


@command(facts_app, "add")
def facts_add(
    text: Annotated[str, typer.Argument(help="The fact, as a sentence.")],
    user: UserOption,
    agent: AgentOption = None,
    tenant: TenantOption = None,
    category: Annotated[
        str, typer.Option("--category", help="preference, knowledge, context, behavior, goal, …")
    ] = "context",
    confidence: Annotated[
        float, typer.Option("--confidence", help="How sure the fact is, from 0 to 1.")
    ] = 0.9,
    as_json: JsonOption = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Add a fact to a memory (a casefold duplicate of a stored fact is refused).

    Example:
        memory-sql facts add --user alice "Prefers tabs" --category preference
    """
    with sql_storage(url, config, create=True) as storage:
        fact = ops.add_fact(
            storage,
            text,
            category=category,
            confidence=confidence,
            user_id=user,
            agent_name=agent,
            tenant_id=tenant,
        ).fact
    scope = Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)
    if as_json:
        print_json(FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, fact).to_dict())
        return
    out.print(
        f"added {fact.id} to {lit(scope)}: {lit(fact.content)}", highlight=False, soft_wrap=True
    )


@command(facts_app, "remove")
def facts_remove(
    fact_id: Annotated[str, typer.Argument(help="The fact's id (see `facts list`).")],
    user: UserOption,
    agent: AgentOption = None,
    tenant: TenantOption = None,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Remove one fact from a memory.

    Example:
        memory-sql facts remove --user alice fact_3f2a9c41d7e0
    """
    with sql_storage(url, config) as storage:
        fact = ops.remove_fact(
            storage, fact_id, user_id=user, agent_name=agent, tenant_id=tenant
        ).fact
    scope = Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)
    out.print(
        f"removed {lit(fact.id)} from {lit(scope)}: {lit(fact.content)}",
        highlight=False,
        soft_wrap=True,
    )


@command(facts_app, "search")
def facts_search(
    text: Annotated[
        str | None,
        typer.Argument(
            help="Words the fact holds, each also as a prefix, case and accents folded "
            "(STRASSE finds Straße, cafe finds Café)."
        ),
    ] = None,
    category: Annotated[str | None, typer.Option("--category", help="Only this category.")] = None,
    min_confidence: Annotated[
        float | None, typer.Option("--min-confidence", help="Only facts at least this sure.")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's facts.")] = None,
    agent: EveryAgentOption = None,
    tenant: EveryTenantOption = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many facts.")] = 50,
    as_json: JsonOption = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Search the facts of every memory (every tenant unless --tenant), highest confidence first.

    TEXT matches case-insensitively after Unicode folding (NFKC and casefold, as duplicates
    are detected), the same on SQLite and PostgreSQL.

    Example:
        memory-sql facts search python --min-confidence 0.8 --category preference
    """
    with sql_storage(url, config) as storage:
        records = ops.search_facts(
            storage,
            text,
            category=category,
            min_confidence=min_confidence,
            tenant_id=tenant,
            user_id=user,
            agent_name=listed_agent(agent),
            limit=limit,
        )
    if as_json:
        print_json([record.to_dict() for record in records])
        return
    _print_facts(records, title=f"{plural(len(records), 'fact')} found", with_scope=True)


def _print_facts(records: list[FactRecord], *, title: str, with_scope: bool) -> None:
    table = Table(title=title, title_justify="left")
    if with_scope:
        table.add_column("memory")
    table.add_column("id", no_wrap=True)
    table.add_column("category")
    table.add_column("confidence", justify="right")
    table.add_column("fact", overflow="fold")
    for record in records:
        scope = f"{record.tenant_id}/{record.user_id}/{record.agent_name or '-'}"
        fact = record.fact
        cells = [lit(fact.id), lit(fact.category), f"{fact.confidence:.2f}", lit(fact.content)]
        table.add_row(*([lit(scope)] if with_scope else []), *cells)
    out.print(table)
