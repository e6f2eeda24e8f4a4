"""``memory-sql queue list | retry | drop``: see the updates waiting or given up, run them again,
or drop them (a way back for updates that failed, say with no LLM configured)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ..queue.manage import KEY_SYNTAX, QueueChange, QueuedUpdate
from ..service import MemoryService
from ._common import (
    ConfigOption,
    UrlOption,
    app,
    command,
    err,
    group,
    lit,
    load_config,
    out,
    plural,
)
from ._data import EveryAgentOption, EveryTenantOption, JsonOption, listed_agent, print_json
from .run import stderr_logging

queue_app = group(help=f"List, retry and drop queued memory updates (KEY: {lit(KEY_SYNTAX)}).")
app.add_typer(queue_app, name="queue")

KeysArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="Updates to act on, as KIND:TENANT/USER/AGENT/THREAD (as `queue list` shows "
        "them); KIND: and parts from the right may be left off (TENANT/USER: all of a user's).",
        show_default=False,
    ),
]
AllOption = Annotated[
    bool, typer.Option("--all", help="Every failed update (given up after max_attempts).")
]


@command(queue_app, "list")
def queue_list(
    failed: Annotated[
        bool, typer.Option("--failed", help="Only updates given up after max_attempts.")
    ] = False,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's updates.")] = None,
    agent: EveryAgentOption = None,
    tenant: EveryTenantOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonOption = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """List the updates in the queue: failed first, then waiting, by due time.

    Each row's KEY names it for `queue retry` and `queue drop`:
    KIND:TENANT/USER/AGENT/THREAD, AGENT - for the unnamed agents' memory.

    Example:
        memory-sql queue list --failed
        memory-sql queue list --user alice --json
    """
    with _service(url, config) as service:
        rows = service.pending_updates(
            failed_only=failed,
            tenant_id=tenant,
            user_id=user,
            agent_name=listed_agent(agent),
            limit=limit,
        )
        counts = service.queue.counts()
    if as_json:
        print_json([row.to_dict() for row in rows])
        return
    shown = f" (showing {len(rows)})" if len(rows) < counts["pending"] + counts["failed"] else ""
    out.print(
        f"{plural(counts['pending'], 'update')} waiting, {counts['failed']} failed{shown}",
        highlight=False,
    )
    if not rows:
        return
    # One row a line with its KEY last and whole, never folded: it is copied into `queue retry`.
    heading = f"{'status':<8} {'attempts':>8}  {'due (UTC)':<19}  key"
    out.print(f"[bold]{heading}[/bold]", highlight=False)
    for row in rows:
        state = _status(row)
        style = _STATUS_STYLE.get(state)
        shown = f"[{style}]{state:<8}[/{style}]" if style else f"{state:<8}"
        out.print(
            f"{shown} {row.attempts:>8}  {row.due_at:%Y-%m-%d %H:%M:%S}  {lit(row.key)}",
            highlight=False,
            soft_wrap=True,
        )
        if row.last_error:
            out.print(f"{'':38}last error: {lit(row.last_error)}", highlight=False, soft_wrap=True)


@command(queue_app, "retry")
def queue_retry(
    keys: KeysArgument = None,
    every_failed: AllOption = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Run updates again: attempts back to 0, no last error, due now.

    With --all every failed update; else the updates KEY names (a waiting one is made
    due now too). A worker (`memory-sql worker`, or a service that starts) runs them.

    Example:
        memory-sql queue retry --all
        memory-sql queue retry turn:default/alice/coder/t1
    """
    selected = _selected(keys, every_failed)
    with _service(url, config) as service:
        change = service.retry_failed(selected)
        model = service.updater.llm.model
    _report("retried", change)
    if change.changed and not model:
        err.print(
            "[yellow]note:[/yellow] no memory LLM model is configured (model_name, "
            "MEMORY_SQL_MODEL_NAME or OPENAI_MODEL) here: they wait until a worker with a model "
            "runs them",
            highlight=False,
            soft_wrap=True,
        )


@command(queue_app, "drop")
def queue_drop(
    keys: KeysArgument = None,
    every_failed: AllOption = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Delete queued updates; their conversations are not learned from.

    With --all every failed update; else the updates KEY names. Asks first unless --yes.

    Example:
        memory-sql queue drop --all --yes
        memory-sql queue drop flush:default/alice/coder/t1
    """
    selected = _selected(keys, every_failed)
    with _service(url, config) as service:
        if not yes:
            what = "every failed update" if selected is None else ", ".join(selected)
            typer.confirm(f"Drop {what}?", abort=True)
        change = service.drop_updates(selected)
    _report("dropped", change)


def _selected(keys: list[str] | None, every_failed: bool) -> list[str] | None:
    if every_failed and keys:
        raise typer.BadParameter("give --all or KEYs, not both", param_hint="KEY")
    if not every_failed and not keys:
        raise typer.BadParameter(
            f"give --all (every failed update) or one or more KEYs: {KEY_SYNTAX}",
            param_hint="KEY",
        )
    return None if every_failed else list(keys or ())


def _service(url: str | None, config: Path | None) -> MemoryService:
    settings = load_config(config, url, create=False)
    with stderr_logging(logging.WARNING):
        return MemoryService(settings, start=False)


def _report(done: str, change: QueueChange) -> None:
    if not change.changed and not change.running:
        out.print(f"no failed update in the queue: nothing {done}", highlight=False)
        return
    out.print(f"{done} {plural(len(change.changed), 'update')}", highlight=False)
    for key in change.changed[:20]:
        out.print(f"  {lit(key)}", highlight=False, soft_wrap=True)
    if len(change.changed) > 20:
        out.print(f"  … and {len(change.changed) - 20} more", highlight=False)
    if change.running:
        err.print(
            f"[yellow]left alone:[/yellow] {plural(len(change.running), 'update')} a worker is "
            "running now: " + ", ".join(lit(key) for key in change.running[:5]),
            highlight=False,
            soft_wrap=True,
        )


_STATUS_STYLE = {"running": "cyan", "failed": "red"}


def _status(row: QueuedUpdate) -> str:
    if row.running:
        return "running"
    return "failed" if row.status == "failed" else "waiting"
