"""``memory-sql ingest | context | worker``: feed conversations, read the memory block, run
the updates in the foreground."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..config import MemoryConfig
from ..database import OutageLog, redacted
from ..errors import ConfigError, MemorySQLError, StorageError
from ..intake.messages import normalize_messages
from ..ops.transfer import TOO_DEEP
from ..scope import Scope, check_thread_id
from ..service import MemoryService
from ..storage import queue_rows
from ._common import ConfigOption, UrlOption, app, command, err, lit, load_config, out, plural
from ._data import AgentOption, TenantOption, UserOption, note_other_tenants

_ID_KEYS = {
    "thread_id": ("thread_id", "threadId"),
    "user_id": ("user_id", "userId"),
    "agent_name": ("agent_name", "agentName"),
    "tenant_id": ("tenant_id", "tenantId"),
}


# ingest ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conversation:
    """One conversation read from a file, ready for ``after_agent``."""

    label: str  # "chats.jsonl:3", for messages
    messages: list[Any]
    thread_id: str
    scope: Scope


class Skip(ValueError):
    """A conversation that cannot be queued; the message names where it came from."""


class Refused(Skip):
    """A conversation naming another user, tenant or agent than ``--user``/``--tenant``/
    ``--agent``: the whole ingest is refused, nothing of it is queued."""


_FLAGS = {"user_id": "--user", "agent_name": "--agent", "tenant_id": "--tenant"}


@command(app, "ingest")
def ingest(
    file: Annotated[
        Path,
        typer.Argument(
            help="A conversation as JSON (a list of messages), a .jsonl file of conversations "
            "(one a line), or a folder of such files.",
            show_default=False,
        ),
    ],
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="The user whose memory it is; required unless every conversation names "
            "its user_id. Given, it wins: a conversation naming another user_id is refused.",
            show_default=False,
        ),
    ] = None,
    agent: AgentOption = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            help="Thread id of the conversation (default: the file name; with a .jsonl file "
            "or a folder, a prefix: THREAD:line).",
            show_default=False,
        ),
    ] = None,
    tenant: TenantOption = None,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait", help="Queue the conversations and return; a worker updates them later."
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds to wait for the updates.")
    ] = 300.0,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Queue conversations for a memory update (after_agent), then wait for it.

    FILE holds one conversation: a JSON list of OpenAI- or LangChain-style
    messages, or an object {"messages": [...], "thread_id": ..., "user_id": ...}.
    A .jsonl file holds one conversation a line, in either form; a folder is
    read file by file (*.json, *.jsonl). A file or line that is not valid JSON
    or not a list of messages is reported and skipped, and the exit status is 1.

    --user, --tenant and --agent, when given, win: a file or line naming a
    different user_id, tenant_id or agent_name is refused (file and line shown)
    and nothing of the ingest is queued. One naming the same value is fine;
    without the flag, the file's value is used.

    Example:
        memory-sql ingest chat.json --user alice --agent coder
        memory-sql ingest conversations.jsonl --user alice --no-wait
    """
    # A short-lived command reports what it could not queue rather than spooling it.
    settings = load_config(config, url).model_copy(update={"spool_max_conversations": 0})
    if not settings.enabled:
        raise MemorySQLError("memory is disabled in the config (enabled: false); not queued")
    many = file.is_dir() or file.suffix.lower() == ".jsonl"
    defaults = {"user_id": user, "agent_name": agent, "tenant_id": tenant}
    Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)  # refuse a bad --user now
    if not many:
        conversation = read_conversation(file, thread or file.stem, defaults)
        with (
            stderr_logging(logging.WARNING, quiet_updates=True),
            MemoryService(settings, start=not no_wait) as service,
        ):
            queued = _queue(service, [conversation], progress=None)
            _finish(service, queued, invalid=0, no_wait=no_wait, timeout=timeout)
        return

    sources = _files(file)
    items: list[Conversation | Skip] = []
    for path in sources:
        prefix = _thread_prefix(path, file, thread)
        if path.suffix.lower() == ".jsonl":
            items.extend(read_jsonl(path, prefix, defaults))
        else:
            try:
                items.append(read_conversation(path, prefix, defaults))
            except Skip as exc:
                items.append(exc)
    conversations = [item for item in items if isinstance(item, Conversation)]
    invalid = len(items) - len(conversations)
    refused = sum(isinstance(item, Refused) for item in items)
    for item in items:
        if isinstance(item, Skip):
            label = "refused" if isinstance(item, Refused) else "skipped"
            err.print(f"[red]{label}:[/red] {lit(item)}", highlight=False, soft_wrap=True)
    if refused:
        raise MemorySQLError(
            f"{file}: {refused} of {plural(len(items), 'conversation')} name another user, "
            "tenant or agent than the command line; nothing queued"
        )
    if not conversations:
        raise MemorySQLError(f"{file}: no valid conversation in {len(items)}; nothing queued")
    with (
        stderr_logging(logging.WARNING, quiet_updates=True),
        MemoryService(settings, start=not no_wait) as service,
    ):
        with Progress(
            TextColumn("queueing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
        ) as progress:
            queued = _queue(service, conversations, progress=progress)
        _finish(service, queued, invalid=invalid, no_wait=no_wait, timeout=timeout)


def read_conversation(path: Path, thread_id: str, defaults: dict[str, str | None]) -> Conversation:
    """The conversation in the JSON file ``path``.

    Raises:
        Skip: the file cannot be read, is not JSON, or does not hold a valid conversation.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise Skip(f"{path}: not UTF-8 text; not queued") from None
    except OSError as exc:
        raise Skip(f"{path}: cannot read it ({exc.strerror or exc}); not queued") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Skip(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}); not queued"
        ) from None
    except RecursionError:
        raise Skip(f"{path}: {TOO_DEEP}; not queued") from None
    return _conversation(data, str(path), thread_id, defaults)


def read_jsonl(
    path: Path, prefix: str, defaults: dict[str, str | None]
) -> Iterator[Conversation | Skip]:
    """Each non-blank line of ``path`` as a conversation, or a :class:`Skip` saying why not."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        yield Skip(f"{path}: not UTF-8 text; nothing queued from it")
        return
    except OSError as exc:
        yield Skip(f"{path}: cannot read it ({exc.strerror or exc}); nothing queued from it")
        return
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        label = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            yield Skip(f"{label}: not valid JSON ({exc.msg}, column {exc.colno}); not queued")
            continue
        except RecursionError:
            yield Skip(f"{label}: {TOO_DEEP}; not queued")
            continue
        try:
            yield _conversation(data, label, f"{prefix}:{number}", defaults)
        except Skip as exc:
            yield exc


def _conversation(
    data: Any, label: str, thread_id: str, defaults: dict[str, str | None]
) -> Conversation:
    ids = dict(defaults)
    ids["thread_id"] = thread_id
    if isinstance(data, dict):
        _check_scope_flags(data, label, defaults)
        if not isinstance(data.get("messages"), list):
            raise Skip(f'{label}: an object needs a "messages" list; not queued')
        for name, keys in _ID_KEYS.items():
            for key in keys:
                if data.get(key) is not None:
                    if not isinstance(data[key], str):
                        raise Skip(f"{label}: {key} must be a string; not queued")
                    if defaults.get(name) is None:  # a flag given on the command line wins
                        ids[name] = data[key]
        messages = data["messages"]
    elif isinstance(data, list):
        messages = data
    else:
        raise Skip(
            f"{label}: expected a list of messages (or an object with one), "
            f"got {type(data).__name__}; not queued"
        )
    if ids["user_id"] is None:
        raise Skip(f"{label}: no user: pass --user or give a user_id; not queued")
    try:
        normalize_messages(messages)
        scope = Scope.of(
            user_id=ids["user_id"], agent_name=ids["agent_name"], tenant_id=ids["tenant_id"]
        )
        check_thread_id(ids["thread_id"])
    except MemorySQLError as exc:
        raise Skip(f"{label}: {exc}; not queued") from None
    return Conversation(label, messages, str(ids["thread_id"]), scope)


def _check_scope_flags(data: dict[str, Any], label: str, flags: dict[str, str | None]) -> None:
    """Refuse ``data`` if it names another user, tenant or agent than a flag given (agent
    names compare lower-cased, as they are stored)."""
    differences = []
    for name, flag in _FLAGS.items():
        given = flags.get(name)
        if given is None:
            continue
        for key in _ID_KEYS[name]:
            value = data.get(key)
            if value is None:
                continue
            same = isinstance(value, str) and (
                value.lower() == given.lower() if name == "agent_name" else value == given
            )
            if not same:
                differences.append(f"{key} {value!r} is not {flag} {given!r}")
    if differences:
        raise Refused(
            f"{label}: {', '.join(differences)}; refused, nothing of this ingest is queued"
        )


def _files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return [folder]
    found = sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in (".json", ".jsonl")
    )
    if not found:
        raise MemorySQLError(f"{folder}: no .json or .jsonl file in this folder")
    return found


def _thread_prefix(path: Path, given: Path, thread: str | None) -> str:
    if thread is None:
        return path.stem
    return thread if path == given else f"{thread}:{path.stem}"


@dataclass
class _Queued:
    conversations: int = 0
    nothing_to_learn: int = 0
    keys: set[tuple[Scope, str]] | None = None


def _queue(
    service: MemoryService, conversations: Sequence[Conversation], progress: Progress | None
) -> _Queued:
    result = _Queued(keys=set())
    assert result.keys is not None
    task = progress.add_task("queue", total=len(conversations)) if progress else None
    for item in conversations:
        kept = service.take_conversation(item.messages)
        if not kept.learnable:
            result.nothing_to_learn += 1
            (progress.console if progress else err).print(
                f"[yellow]nothing to learn:[/yellow] {lit(item.label)} has no user turn "
                "with an assistant reply left after filtering; not queued",
                highlight=False,
                soft_wrap=True,
            )
        elif service.queue_kept(
            kept,
            thread_id=item.thread_id,
            user_id=item.scope.user_id,
            agent_name=item.scope.agent_name,
            tenant_id=item.scope.tenant_id,
        ):
            result.conversations += 1
            result.keys.add((item.scope, item.thread_id))
        else:  # memory is off
            raise MemorySQLError(f"{item.label}: not queued: memory is off (enabled: false)")
        if progress is not None and task is not None:
            progress.advance(task)
    return result


def _finish(
    service: MemoryService, queued: _Queued, *, invalid: int, no_wait: bool, timeout: float
) -> None:
    keys = queued.keys or set()
    updates = len(keys)
    summary = f"queued {plural(queued.conversations, 'conversation')}"
    if updates != queued.conversations:
        summary += f" as {plural(updates, 'update')} (one per thread; the latest wins)"
    skipped = invalid + queued.nothing_to_learn
    if skipped:
        summary += f", skipped {skipped} ({invalid} invalid, {queued.nothing_to_learn} with "
        summary += "nothing to learn)"
    out.print(summary, highlight=False)
    if no_wait:
        if updates:
            out.print(
                f"left pending (--no-wait): {plural(updates, 'update')} "
                f"{'waits' if updates == 1 else 'wait'} in the queue for `memory-sql worker` "
                "or the next service that starts",
                highlight=False,
            )
    elif updates:
        with err.status(f"waiting for {plural(updates, 'memory update')}…"):
            service.flush(timeout=timeout)
        left = leftover_updates(service, keys)
        for line in left:
            err.print(f"[red]not updated:[/red] {lit(line)}", highlight=False, soft_wrap=True)
        done = updates - len(left)
        out.print(f"updated: {done} of {plural(updates, 'memory update')} done", highlight=False)
        for scope in sorted({scope for scope, _ in keys}, key=str)[:10]:
            doc = service.storage.load(**scope.arguments())
            out.print(
                f"  {lit(scope)}: {plural(len(doc.facts), 'fact')}, version {doc.version}",
                highlight=False,
                soft_wrap=True,
            )
        if left:
            raise typer.Exit(1)
    if invalid:
        raise typer.Exit(1)


def leftover_updates(service: MemoryService, keys: Iterable[tuple[Scope, str]]) -> list[str]:
    """One line for each of ``keys`` still in the queue: its state and last error."""
    wanted = [(s.tenant_id, s.user_id, s.agent_key, thread) for s, thread in keys]
    lines = []
    for row in queue_rows.rows_of_threads(service.queue.engine, wanted):
        scope = f"{row.tenant_id}/{row.user_id}/{row.agent_name or '-'}"
        where = f"{scope} thread {row.thread_id}"
        if row.status == "failed":
            state = f"failed after {row.attempts} attempts"
        elif row.last_error:
            state = f"attempt {row.attempts} failed, will retry"
        else:
            state = "still pending (timed out waiting)"
        error = f": {row.last_error}" if row.last_error else ""
        lines.append(f"{where}: {state}{error}")
    return sorted(lines)


# context ---------------------------------------------------------------------------------------


@command(app, "context")
def context(
    user: UserOption,
    agent: AgentOption = None,
    tenant: TenantOption = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="The turn about to be answered: the facts most relevant to it come first.",
        ),
    ] = None,
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Print the memory block an agent's system prompt gets for USER (memory_context).

    Example:
        memory-sql context --user alice --agent coder --query "how do I deploy?"
    """
    settings = load_config(config, url, create=False)
    with stderr_logging(logging.WARNING), MemoryService(settings, start=False) as service:
        # Loaded here first so that a database problem is an error, not an empty block.
        scope = Scope.of(user_id=user, agent_name=agent, tenant_id=tenant)
        doc = service.storage.load(**scope.arguments())
        block = service.render_context(doc, scope=scope, query=query)
    if not settings.enabled:
        err.print(
            f"memory is disabled (enabled: false): no block for {lit(scope)}", highlight=False
        )
    elif not block:
        state = "empty" if doc.is_empty() else "nothing to show"
        err.print(f"the memory of {lit(scope)} is {state}: no block to inject", highlight=False)
        engine = getattr(service.storage, "engine", None)
        if doc.version == 0 and engine is not None:
            note_other_tenants(engine, scope, tenant)
    else:
        out.print(block, markup=False, highlight=False, soft_wrap=True)


# worker ----------------------------------------------------------------------------------------


@command(app, "worker")
def worker(
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", min=1, max=32, help="Update threads (default: the config's workers)."
        ),
    ] = None,
    status_every: Annotated[
        float,
        typer.Option(
            "--status-every",
            min=0.1,
            help="Seconds between status lines (printed when something changed).",
        ),
    ] = 30.0,
    shutdown_timeout: Annotated[
        float,
        typer.Option(
            "--shutdown-timeout",
            min=0,
            help="On SIGTERM/SIGINT, seconds to wait for updates in flight.",
        ),
    ] = 30.0,
    metrics_port: Annotated[
        int,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="Serve Prometheus metrics (updates, LLM calls and tokens, the queue) on this "
            "port at /metrics; 0: none. Needs the server extra.",
        ),
    ] = 0,
    metrics_host: Annotated[
        str, typer.Option("--metrics-host", help="Address of the metrics endpoint.")
    ] = "127.0.0.1",
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Run queued memory updates in the foreground until SIGTERM or Ctrl-C.

    Any number of workers (and services) can share one database: each claims
    due updates with a lease. On SIGTERM/SIGINT the worker stops claiming,
    waits for the updates in flight and leaves the rest queued.

    Example:
        memory-sql worker --url postgresql://postgres@127.0.0.1/memory --workers 4
    """
    settings = load_config(config, url)
    if workers is not None:
        settings = settings.model_copy(update={"workers": workers})  # range checked above
    metrics = _metrics() if metrics_port else None
    stop = threading.Event()
    received: list[str] = []

    def on_signal(number: int, _frame: Any) -> None:
        received.append(signal.Signals(number).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    outage = OutageLog("memory-sql worker")
    try:
        with stderr_logging(logging.INFO):
            on_result = metrics.observe_update if metrics is not None else None
            service = _start_when_the_database_answers(settings, stop, outage, on_result)
            if service is None:
                out.print(f"{received[0] if received else 'stop'}: stopped before starting")
                return
            exporter = None
            if metrics is not None:
                exporter = _export_metrics(metrics, service, metrics_host, metrics_port)
            try:
                first = _status(service, outage)
                out.print(
                    f"worker started: database {lit(redacted(settings.storage))}, "
                    f"{plural(settings.workers, 'thread')}; {_status_line(first)}",
                    highlight=False,
                )
                last = first
                while not stop.wait(status_every):
                    now = _status(service, outage)
                    if now != last and now.get("pending") is not None:
                        out.print(_status_line(now), highlight=False)
                    last = now
                signal_name = received[0] if received else "stop"
                out.print(
                    f"{signal_name}: stopping; waiting up to {shutdown_timeout:g} s for "
                    f"{plural(service.worker.in_flight, 'update')} in flight",
                    highlight=False,
                )
                started = time.monotonic()
                finished = service.worker.stop(shutdown_timeout)
                left = _status(service, outage)
            finally:
                if exporter is not None:
                    exporter.shutdown()
                service.close(timeout=0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    took = time.monotonic() - started
    if not finished:
        err.print(
            f"[yellow]{plural(left['in_flight'], 'update')} still running after "
            f"{shutdown_timeout:g} s were abandoned; their rows run again when the lease "
            f"expires ({settings.lease_seconds:g} s)[/yellow]"
        )
    pending = left["pending"]
    waiting = "unknown (database unavailable)" if pending is None else plural(pending, "update")
    out.print(
        f"worker stopped in {took:.1f} s: {_status_line(left)}; "
        f"{waiting} left pending for the next start",
        highlight=False,
    )


def _metrics() -> Any:
    """The service's metrics (:mod:`memory_sql.server.metrics`), or a ConfigError naming the
    extra they need."""
    try:
        from ..server.metrics import Metrics
    except ImportError as exc:
        raise ConfigError(
            f"--metrics-port needs the server extra ({exc.name} is missing): "
            "from the clone, pip install -e '.[server]' (or make demo)"
        ) from None
    return Metrics()


def _export_metrics(metrics: Any, service: MemoryService, host: str, port: int) -> Any:
    """Serve ``metrics`` of ``service`` at http://host:port/metrics in a thread; returns the
    HTTP server (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    metrics.watch(service)
    server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    out.print(f"metrics at http://{host}:{port}/metrics", highlight=False)
    return server


def _start_when_the_database_answers(
    settings: MemoryConfig,
    stop: threading.Event,
    outage: OutageLog,
    on_result: Any = None,
) -> MemoryService | None:
    """A started service; while the database cannot be reached, tried again every few
    seconds until it can or ``stop`` is set (then None). Any other problem is raised."""
    while True:
        try:
            service = MemoryService(settings, start=True, on_result=on_result)
        except StorageError as exc:
            outage.failed(exc)
            if stop.wait(_RETRY_START_SECONDS):
                return None
        else:
            outage.succeeded()
            return service


_RETRY_START_SECONDS = 5.0


def _status(service: MemoryService, outage: OutageLog) -> dict[str, int | None]:
    """The service's status; the queue's counts are None while its database is down."""
    try:
        status: dict[str, int | None] = dict(service.status())
    except MemorySQLError as exc:
        outage.failed(exc)
        status = {
            "pending": None,
            "failed": None,
            "in_flight": service.worker.in_flight,
            "completed": service.worker.completed,
            "failed_runs": service.worker.failed,
        }
    else:
        outage.succeeded()
    return status


def _status_line(status: dict[str, int | None]) -> str:
    def shown(name: str) -> str:
        value = status[name]
        return "?" if value is None else str(value)

    return (
        f"pending {shown('pending')}, running {shown('in_flight')}, "
        f"done {shown('completed')}, failed runs {shown('failed_runs')}, "
        f"given up {shown('failed')}"
    )


# shared ----------------------------------------------------------------------------------------


@contextmanager
def stderr_logging(level: int, *, quiet_updates: bool = False) -> Iterator[None]:
    """memory_sql's log records on stderr, one line each (no tracebacks), while in the block:
    Rich's columns on a terminal, plain ``time LEVEL logger: message`` lines, never wrapped,
    when stderr is a file or a pipe (a log a program reads, or a container's).

    ``quiet_updates`` leaves out the worker's and updater's warnings about failed updates,
    for commands that report those themselves."""
    logger = logging.getLogger("memory_sql")
    handler: logging.Handler
    if err.is_terminal:
        handler = _OneLineHandler(
            console=err, show_path=False, markup=False, rich_tracebacks=False, level=level
        )
    else:
        handler = logging.StreamHandler(err.file)
        handler.setLevel(level)
        handler.setFormatter(_OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if quiet_updates:
        handler.addFilter(
            lambda r: r.levelno >= logging.ERROR or not r.name.startswith(_UPDATE_LOGGERS)
        )
    before = logger.level
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


_UPDATE_LOGGERS = ("memory_sql.queue", "memory_sql.update")


def _one_line(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its exception, if any, as ``: Type: message`` on the same line."""
    if not (record.exc_info and record.exc_info[1] is not None):
        return record
    exc = record.exc_info[1]
    record = logging.makeLogRecord(record.__dict__)
    record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
    record.args = None
    record.exc_info = None
    record.exc_text = None
    return record


class _OneLineHandler(RichHandler):
    def emit(self, record: logging.LogRecord) -> None:
        super().emit(_one_line(record))


class _OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(super().format(_one_line(record)).splitlines())
