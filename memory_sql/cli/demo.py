"""``memory-sql demo``: the whole pipeline at work on a fresh SQLite file, with no setup; with
``--serve``, the HTTP service on that file, learning from the recorded replies while a newcomer
posts the sample conversations with curl."""

from __future__ import annotations

import json
import os
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from pydantic import SecretStr
from rich.table import Table
from rich.text import Text

from .. import migrations
from ..config import MemoryConfig
from ..database import create_engine, redacted, resolve_url
from ..demo import SampleConversation, load_conversations
from ..demo.replay import MODEL, ReplayLLM, load_recordings
from ..errors import MemorySQLError, StorageError
from ..models import MemoryDocument
from ..scope import Scope, ScopeArguments
from ..service import MemoryService
from ..storage.dialects import database_file
from ..storage.users import users_in_database
from ..update.prompt import SECTION_KEYS
from ..update.rejections import describe
from ._common import ConfigOption, app, command, err, lit, load_config, out
from .run import leftover_updates
from .serve import serve as serve_command

DEFAULT_URL = "sqlite:///memory_sql_demo.db"
DEMO_TENANT = "demo"


@command(app, "demo")
def demo(
    url: Annotated[
        str,
        typer.Option(
            "--url", help="The SQLite file to (re)create for the demo, as sqlite:///path.db."
        ),
    ] = DEFAULT_URL,
    config: ConfigOption = None,
    replay: Annotated[
        bool,
        typer.Option(
            "--replay", help="Replay the recorded model responses even if an LLM is configured."
        ),
    ] = False,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve the HTTP API on the fresh file instead, with the replayed model, and "
            "print the curl commands that post the sample conversations.",
        ),
    ] = False,
    host: Annotated[str, typer.Option("--host", help="With --serve: the address.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=1, max=65535, help="With --serve: the port.")
    ] = 8080,
    with_worker: Annotated[
        bool,
        typer.Option(
            "--with-worker/--no-worker",
            help="With --serve: run the updates in the service, or leave them to a "
            "`memory-sql worker --config <file>.yaml` (the demo's config, written next to it).",
        ),
    ] = True,
) -> None:
    """Feed sample conversations through the real pipeline and show the memory.

    English and Chinese conversations, one with a correction, go through
    filter, signals, queue, updater, LLM and save on a fresh SQLite file
    (deleted and recreated each run); then the facts, the sections and the
    block an agent's prompt would get are shown. With an LLM configured
    (model_name and llm_base_url, or OPENAI_MODEL and OPENAI_API_KEY) the demo
    asks it; with none it replays recorded model responses through a local
    chat-completions server.

    With --serve nothing is fed: the HTTP service runs on the fresh file (with
    the recorded responses replayed, always, the worker in-process unless --no-worker) until Ctrl-C,
    and the demo prints an API key and the curl commands that post each sample
    conversation and read the memory block.

    Example:
        memory-sql demo
        OPENAI_API_KEY=sk-... OPENAI_MODEL=gpt-4o-mini memory-sql demo
        memory-sql demo --serve --port 8080
    """
    path = _fresh_sqlite_file(url)
    settings = load_config(config).replace(
        **{
            "storage": url,
            "storage_class": None,
            "debounce_seconds": 0.0,
            "max_debounce_seconds": 0.0,
            "enabled": True,
        }
    )
    engine = create_engine(url)
    try:
        migrations.upgrade(engine)
    finally:
        engine.dispose()
    out.print(f"memory_sql demo: a fresh memory in {lit(path)}", highlight=False, soft_wrap=True)
    with ExitStack() as stack:
        if serve or replay or not _llm_configured(settings):
            server = stack.enter_context(ReplayLLM(load_recordings()))
            settings = settings.replace(
                **{
                    "model_name": MODEL,
                    "llm_base_url": server.base_url,
                    "llm_api_key": SecretStr("not-needed"),
                    "llm_max_retries": 0,
                    "llm_timeout_seconds": 10.0,
                }
            )
            why = "--serve" if serve else "--replay" if replay else "no LLM configured"
            out.print(
                f"[bold yellow]{why}: replaying recorded responses[/bold yellow] "
                f"(memory_sql/demo/recorded_responses.json, served at {lit(server.base_url)})"
                + (
                    ""
                    if serve
                    else "; set model_name and llm_base_url, or OPENAI_MODEL and "
                    "OPENAI_API_KEY, to use a real model"
                ),
                highlight=False,
            )
        else:
            where = redacted(settings.llm.base_url or "https://api.openai.com/v1")
            out.print(
                f"LLM: model {lit(settings.llm.model)} at {lit(where)}",
                highlight=False,
                soft_wrap=True,
            )
        if serve:
            _serve(path, settings, host=host, port=port, with_worker=with_worker)
            return
        service = stack.enter_context(MemoryService(settings))
        conversations = load_conversations()
        failed = []  # a failed update is reported, and the other conversations still run
        for number, sample in enumerate(conversations, 1):
            problem = _feed(service, sample, number, len(conversations), settings)
            if problem is not None:
                failed.append(f"[{number}] {sample.title}: {problem}")
        first = conversations[0]
        _show(service, first)
        refused = service.rejections()
        out.print(
            "Parts of the model's replies refused (not stored): "
            + (describe(refused) if refused else "none"),
            style="yellow" if refused else "dim",
            highlight=False,
        )
        scope = Scope.of(user_id=first.user_id, agent_name=first.agent_name)
    if failed:
        hint = (
            ""
            if settings.llm.model == MODEL
            else " (try --replay; a model on a CPU may need a longer llm_timeout_seconds: "
            "memory-sql llm check says how long)"
        )
        for line in failed:
            err.print(f"[red]failed:[/red] {lit(line)}", highlight=False, soft_wrap=True)
        raise MemorySQLError(
            f"{len(failed)} of {len(conversations)} updates failed{hint}; what the others "
            f"learned is stored in {path}"
        )
    out.print(
        f"\nStored in {lit(path)}. Try: {lit(runnable_command())} context --url {lit(url)} "
        f"--user {scope.user_id}" + (f" --agent {scope.agent_name}" if scope.agent_name else ""),
        highlight=False,
        soft_wrap=True,
    )


def runnable_command() -> str:
    """How to run ``memory-sql`` from here: ``memory-sql`` when that name on ``PATH`` is this
    installation's, else the script beside this Python (``.venv/bin/memory-sql`` after
    ``make demo``, relative to the working directory when inside it), else ``python -m
    memory_sql``."""
    script = Path(sys.executable).parent / ("memory-sql.exe" if os.name == "nt" else "memory-sql")
    on_path = shutil.which("memory-sql")
    if not script.exists():
        return "memory-sql" if on_path else f"{sys.executable} -m memory_sql"
    if on_path and Path(on_path).resolve() == script.resolve():
        return "memory-sql"
    try:
        return str(script.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _serve(path: Path, settings: MemoryConfig, *, host: str, port: int, with_worker: bool) -> None:
    """``memory-sql serve`` on the demo's file with ``settings`` (written next to it as a
    config file, which a separate worker can be given), after printing how to use it."""
    from ..server.keys import create_key

    engine = create_engine(settings.storage)
    try:
        secret = create_key(engine, tenant_id=DEMO_TENANT, role="write")[1]
    finally:
        engine.dispose()
    path = path.resolve()
    folder = path.with_suffix(".requests")
    folder.mkdir(exist_ok=True)
    bodies = []
    for sample in load_conversations():
        body = {
            "user_id": sample.user_id,
            "agent_name": sample.agent_name,
            "thread_id": sample.thread_id,
            "messages": list(sample.messages),
        }
        file = folder / f"{sample.id}.json"
        file.write_text(json.dumps(body, ensure_ascii=False, indent=2), encoding="utf-8")
        bodies.append((sample, file))
    config = path.with_suffix(".yaml")
    written = settings.model_dump(mode="json", exclude_defaults=True)
    written["storage"] = f"sqlite:///{path}"
    written.setdefault("llm", {})["api_key"] = "not-needed"  # the replay's
    config.write_text(json.dumps({"memory": written}, indent=2), encoding="utf-8")
    base = f"http://{host}:{port}"
    first = bodies[0][0]
    agent = f"?agent_name={first.agent_name}" if first.agent_name else ""
    lines = [
        "",
        f"API key of the tenant {DEMO_TENANT!r} (role write): {secret}",
        f"The service's config: {config} (a separate worker: {runnable_command()} worker "
        f"--config {config})",
        "",
        "In another terminal, post the sample conversations one by one and watch the memory:",
        "",
        f"  KEY={secret}",
        *(
            f'  curl -s -X POST {base}/v1/conversations -H "Authorization: Bearer $KEY" '
            f"-H 'Content-Type: application/json' --data @{file}   # {sample.title}"
            for sample, file in bodies
        ),
        f"  curl -s '{base}/v1/users/{first.user_id}/context{agent}' "
        f'-H "Authorization: Bearer $KEY"',
        f"  curl -s '{base}/v1/users/{first.user_id}/facts{agent}' "
        f'-H "Authorization: Bearer $KEY"',
        "",
        f"Serving on {base} (OpenAPI docs at {base}/docs) until Ctrl-C"
        + ("" if with_worker else "; updates wait for `memory-sql worker`")
        + ".",
    ]
    for line in lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    out.file.flush()  # before the server's log, even into a pipe
    serve_command(host=host, port=port, with_worker=with_worker, config=config)


def _fresh_sqlite_file(url: str) -> Path:
    """Delete the demo's SQLite file (and its -wal, -shm), refusing one holding other data."""
    parsed = resolve_url(url)
    database = database_file(parsed)
    if database is None:
        raise ValueError(
            f"the demo recreates a SQLite file: give --url sqlite:///path.db, not "
            f"{redacted(parsed)}"
        )
    path = Path(database)
    if path.exists() and path.stat().st_size > 0:
        _check_is_demo(url, path)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def _check_is_demo(url: str, path: Path) -> None:
    demo_users = {c.user_id for c in load_conversations()}
    engine = create_engine(url)
    try:
        users = users_in_database(engine)
        if users is None:
            raise MemorySQLError(
                f"{path} exists and is not a memory_sql demo database; not deleting it "
                "(choose another --url)"
            )
    except StorageError as exc:
        raise MemorySQLError(
            f"{path} exists and cannot be read as SQLite ({exc}); not deleting it"
        ) from None
    finally:
        engine.dispose()
    others = users - demo_users
    if others:
        raise MemorySQLError(
            f"{path} holds the memories of other users ({', '.join(sorted(others)[:3])}…); "
            "not deleting it (choose another --url)"
        )


def _llm_configured(settings: MemoryConfig) -> bool:
    """A model, and somewhere to send it: a base URL, or an API key for OpenAI's own API.
    (from_env / from_yaml already folded OPENAI_* into the settings.)"""
    return bool(settings.llm.model) and bool(settings.llm.base_url or settings.llm.api_key)


def _feed(
    service: MemoryService,
    sample: SampleConversation,
    number: int,
    total: int,
    settings: MemoryConfig,
) -> str | None:
    """Feed ``sample`` and show what its update changed; why the update failed, or None."""
    scope: ScopeArguments = {
        "user_id": sample.user_id,
        "agent_name": sample.agent_name,
        "tenant_id": None,
    }
    kept = service.take_conversation(sample.messages)
    found = kept.signals
    signals = [name for name in ("correction", "reinforcement") if getattr(found, name)]
    out.print(
        f"\n[bold][{number}/{total}] {lit(sample.title)}[/bold] ({lit(sample.language)}; "
        f"thread {lit(sample.thread_id)}): {len(sample.messages)} messages, "
        f"{len(kept.turns)} kept after filtering"
        + (f"; [magenta]{' + '.join(signals)} detected[/magenta]" if signals else ""),
        highlight=False,
    )
    before = service.storage.load(**scope)
    refused_before = service.rejections()
    if not service.queue_kept(kept, thread_id=sample.thread_id, **scope):
        raise MemorySQLError(f"the sample conversation {sample.id!r} could not be queued")
    timeout = (settings.llm.max_retries + 1) * settings.llm.timeout_seconds + 10
    service.flush(timeout=timeout)
    left = leftover_updates(service, [(Scope.of(**scope), sample.thread_id)])
    if left:
        out.print(f"  ! the update failed: {lit(left[0])}", style="red", highlight=False)
        return left[0]
    after = service.storage.load(**scope)
    _print_changes(before, after)
    refused = {
        reason: number - refused_before.get(reason, 0)
        for reason, number in service.rejections().items()
        if number > refused_before.get(reason, 0)
    }
    if refused:
        out.print(
            f"  ! refused from the model's reply: {describe(refused)}",
            style="yellow",
            highlight=False,
        )
    return None


def _print_changes(before: MemoryDocument, after: MemoryDocument) -> None:
    old = {f.id: f for f in before.facts}
    new = {f.id: f for f in after.facts}
    for fact in after.facts:
        if fact.id not in old:
            line = Text("  + ", style="green")
            line.append(f"[{fact.category} {fact.confidence:.2f}] {fact.content}")
            out.print(line, soft_wrap=True)
    for fact in before.facts:
        if fact.id not in new:
            line = Text("  - ", style="red")
            line.append(f"[{fact.category} {fact.confidence:.2f}] {fact.content}", style="strike")
            out.print(line, soft_wrap=True)
    changed = [
        SECTION_KEYS[name]
        for name, section in after.sections().items()
        if section.summary != before.sections()[name].summary
    ]
    if changed:
        out.print(f"  ~ sections rewritten: {', '.join(changed)}", style="cyan", highlight=False)
    if not changed and len(old) == len(new) and old.keys() == new.keys():
        out.print("  (nothing new to remember)", style="dim")
    out.print(f"  memory version {after.version}", style="dim", highlight=False)


def _show(service: MemoryService, sample: SampleConversation) -> None:
    scope: ScopeArguments = {
        "user_id": sample.user_id,
        "agent_name": sample.agent_name,
        "tenant_id": None,
    }
    doc = service.storage.load(**scope)
    facts = Table(
        title=f"Facts of {lit(Scope.of(**scope))} (version {doc.version})", title_justify="left"
    )
    facts.add_column("category")
    facts.add_column("confidence")
    facts.add_column("fact", overflow="fold", ratio=3)
    facts.add_column("avoid", overflow="fold", ratio=2)
    for fact in sorted(doc.facts, key=lambda f: (-f.confidence, f.category)):
        facts.add_row(
            Text(fact.category, style="bold red" if fact.category == "correction" else ""),
            f"{fact.confidence:.2f}",
            Text(fact.content),
            Text(fact.source_error or ""),
        )
    out.print()
    out.print(facts)
    sections = Table(title="Sections", title_justify="left")
    sections.add_column("section")
    sections.add_column("summary", overflow="fold")
    for name, section in doc.sections().items():
        if section.summary:
            sections.add_row(SECTION_KEYS[name], Text(section.summary))
    out.print(sections)
    out.rule("What the agent's system prompt gets (memory_context)")
    out.print(service.memory_context(**scope), markup=False, highlight=False, soft_wrap=True)
    out.rule()
