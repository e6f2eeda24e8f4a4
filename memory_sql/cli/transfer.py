"""``memory-sql export | import | forget``: move memories in and out, delete a user's data."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TextIO

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from .. import ops
from ..database import redacted
from ..errors import MemorySQLError
from ..integrations.deerflow import folders
from ..scope import Scope
from ._common import ConfigOption, UrlOption, app, command, err, lit, out, plural
from ._data import AgentOption, TenantOption, UserOption, note_other_tenants, sql_storage

JsonlOption = Annotated[
    Path | None,
    typer.Option(
        "--jsonl",
        help="A JSON Lines file of many memories, one a line ('-': standard output/input).",
        show_default=False,
    ),
]


@command(app, "export")
def export(
    user: Annotated[
        str | None, typer.Option("--user", help="Export this user's memory (memory.json).")
    ] = None,
    agent: AgentOption = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The tenant (default: 'default' for --user, as in every command naming a "
            "user; with --jsonl: every tenant).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write memory.json here (default: standard output)."),
    ] = None,
    jsonl: JsonlOption = None,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Export one memory as DeerFlow's memory.json, or many as JSON Lines.

    With --jsonl: every memory of --tenant, or of the whole database.
    A file is replaced (atomically) only when a memory matched; otherwise it
    is left as it was and the exit status is 1.

    Example:
        memory-sql export --user alice --agent coder --output memory.json
        memory-sql export --tenant acme --jsonl acme.jsonl
    """
    if jsonl is not None:
        if user is not None or agent is not None or output is not None:
            raise ValueError("--jsonl exports whole tenants: leave out --user, --agent, --output")
        with sql_storage(url, config) as storage:
            where = redacted(storage.engine.url)
            if str(jsonl) == "-":
                count = ops.export_jsonl(storage, sys.stdout, tenant_id=tenant)
                err.print(
                    f"exported {plural(count, 'memory')} from {lit(where)}",
                    highlight=False,
                    soft_wrap=True,
                )
                return
            with _atomic_write(jsonl) as stream:
                count = ops.export_jsonl(storage, stream, tenant_id=tenant)
                if count == 0:  # the temporary file goes, the target stays as it was
                    matched = f" --tenant {tenant}" if tenant is not None else ""
                    raise MemorySQLError(
                        f"no memory matched{matched} in {where}; {jsonl} left unchanged"
                    )
        out.print(
            f"exported {plural(count, 'memory')} from {lit(where)} to {lit(jsonl)}",
            highlight=False,
            soft_wrap=True,
        )
        return
    if user is None:
        raise ValueError("give --user for one memory (memory.json), or --jsonl FILE for many")
    scope = Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)
    with sql_storage(url, config) as storage:
        where = redacted(storage.engine.url)
        data = ops.export_memory(storage, user_id=user, agent_name=agent, tenant_id=tenant)
        if data["revision"] == 0:
            note_other_tenants(storage.engine, scope, tenant)
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if data["revision"] == 0 and output is not None:
        raise MemorySQLError(f"no memory matched {scope} in {where}; {output} left unchanged")
    if data["revision"] == 0:
        err.print(
            f"[yellow]note:[/yellow] nothing is stored for {lit(scope)}",
            highlight=False,
            soft_wrap=True,
        )
    if output is None:
        typer.echo(text, nl=False)
        return
    with _atomic_write(output) as stream:
        stream.write(text)
    out.print(
        f"exported {lit(scope)} (version {data['revision']}, {plural(len(data['facts']), 'fact')}) "
        f"to {lit(output)}",
        highlight=False,
        soft_wrap=True,
    )


@command(app, "import")
def import_(
    file: Annotated[
        Path | None,
        typer.Argument(help="A DeerFlow memory.json for the memory of --user.", show_default=False),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="The user whose memory FILE becomes.")
    ] = None,
    agent: AgentOption = None,
    tenant: TenantOption = None,
    jsonl: JsonlOption = None,
    deerflow_dir: Annotated[
        Path | None,
        typer.Option(
            "--deerflow-dir",
            help="DeerFlow's state folder: every user's and agent's memory in it "
            "(users/USER/memory.json, agents/AGENT/memory.json or facts/…/ID.md).",
            show_default=False,
        ),
    ] = None,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Import one memory from DeerFlow's memory.json, many from a JSON Lines export, or a
    whole DeerFlow memory folder.

    The memory becomes what the file holds: its sections and facts, fact ids kept.
    The whole file (or folder) is checked before anything is written.
    Importing the same file again changes nothing.

    Example:
        memory-sql import memory.json --user alice --agent coder
        memory-sql import --jsonl acme.jsonl --url sqlite:///memory.db
        memory-sql import --deerflow-dir ~/.deer-flow --url sqlite:///memory.db
    """
    if deerflow_dir is not None:
        if file is not None or user is not None or agent is not None or jsonl is not None:
            raise ValueError(
                "--deerflow-dir takes users and agents from the folder: leave out FILE, "
                "--user, --agent, --jsonl"
            )
        _import_deerflow_dir(deerflow_dir, tenant, url, config)
        return
    if jsonl is not None:
        if file is not None or user is not None or agent is not None or tenant is not None:
            raise ValueError(
                "--jsonl takes the memories' scopes from the file: leave out FILE, --user, "
                "--agent, --tenant"
            )
        source = "<stdin>" if str(jsonl) == "-" else str(jsonl)
        content = sys.stdin.buffer.read() if source == "<stdin>" else jsonl.read_bytes()
        with sql_storage(url, config, create=True) as storage:
            result = ops.import_jsonl(storage, content, source=source)
        out.print(
            f"imported {plural(result.memories, 'memory')} from {lit(source)}: "
            f"{result.changed} changed, {result.unchanged} unchanged",
            highlight=False,
            soft_wrap=True,
        )
        return
    if file is None or user is None:
        raise ValueError("give FILE and --user for one memory, or --jsonl FILE for many")
    scope = Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)
    content = file.read_bytes()
    with sql_storage(url, config, create=True) as storage:
        before, after = ops.import_memory(
            storage, content, user_id=user, agent_name=agent, tenant_id=tenant, source=str(file)
        )
    if before == after:
        out.print(
            f"{lit(scope)} already holds {lit(file)}: unchanged at version {after}",
            highlight=False,
            soft_wrap=True,
        )
    else:
        out.print(
            f"imported {lit(file)} into {lit(scope)}: version {before} → {after}",
            highlight=False,
            soft_wrap=True,
        )


@command(app, "forget")
def forget(
    user: UserOption,
    tenant: TenantOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Delete every row of a user in one transaction, and print the counts.

    Memories of every agent go, with their facts and sections, waiting updates and the
    fact history. Asks first unless --yes.

    Example:
        memory-sql forget --user alice --tenant acme --yes
    """
    scope = Scope.of(user_id=user, tenant_id=tenant)
    with sql_storage(url, config) as storage:
        where = redacted(storage.engine.url)
        if not yes:
            typer.confirm(
                f"Delete every row of user {scope.user_id} (tenant {scope.tenant_id}) in {where}?",
                abort=True,
            )
        counts = ops.forget_user(storage, scope.user_id, tenant_id=scope.tenant_id)
        if not sum(counts.values()):
            note_other_tenants(storage.engine, scope, tenant)
    out.print(
        f"forgot user {lit(scope.user_id)} (tenant {lit(scope.tenant_id)}): "
        f"{plural(sum(counts.values()), 'row')}",
        highlight=False,
        soft_wrap=True,
    )
    for table, count in counts.items():
        out.print(f"  {table}: {count}", highlight=False, soft_wrap=True)


def _import_deerflow_dir(
    root: Path, tenant: str | None, url: str | None, config: Path | None
) -> None:
    """``import --deerflow-dir``: read and check the folder, then import it with a progress
    bar (:mod:`memory_sql.integrations.deerflow.folders`)."""
    plan = folders.read_folder(root, tenant_id=tenant)
    for problem in plan.problems:
        err.print(
            f"[red]invalid:[/red] {lit(problem.describe(root))}", highlight=False, soft_wrap=True
        )
    if plan.problems:
        raise folders.FolderError(root, plan.problems)
    if not plan.memories:  # before the database is opened: nothing is created
        raise MemorySQLError(
            f"{root}: no DeerFlow memory in this folder; {_state_folder_hint(root)}"
        )
    with (
        sql_storage(url, config, create=True) as storage,
        Progress(
            TextColumn("importing"), BarColumn(), MofNCompleteColumn(), console=err
        ) as progress,
    ):
        task = progress.add_task("import", total=len(plan.memories))
        result = folders.import_folder(storage, plan, progress=lambda _: progress.advance(task))
    for line in folders.summary(result):
        out.print(lit(line), highlight=False, soft_wrap=True)


def _state_folder_hint(root: Path) -> str:
    """What to point ``--deerflow-dir`` at instead of ``root``, which holds no memory."""
    for candidate in (root / ".deer-flow", root / "backend" / ".deer-flow"):
        if candidate.is_dir():
            return f"did you mean {candidate}?"
    if root.name == ".deer-flow":
        return "DeerFlow has written no memory here yet: nothing to import"
    return (
        "give DeerFlow's state folder: $DEER_FLOW_HOME, by default .deer-flow in the folder "
        "DeerFlow runs from (usually backend/.deer-flow)"
    )


@contextmanager
def _atomic_write(path: Path) -> Iterator[TextIO]:
    """A text stream whose content replaces ``path`` in full when the block ends without an
    error (a temporary file beside it, renamed with ``os.replace``), and is thrown away
    otherwise. A file-system error names ``path``, never the temporary file."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(f"cannot write {path}: {exc.strerror or type(exc).__name__}") from None
    try:
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as stream:
                yield stream
            os.replace(tmp, path)
        except OSError as exc:
            raise OSError(
                f"cannot write {path}: {exc.strerror or type(exc).__name__}; left unchanged"
            ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
