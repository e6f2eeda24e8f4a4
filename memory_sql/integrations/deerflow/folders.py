"""Reading DeerFlow's memory folders, for ``memory-sql import --deerflow-dir PATH``.

Two layouts, as DeerFlow writes them (PATH is DeerFlow's state folder, its ``storage_path``;
the same folder may hold both, user by user):

- **June 2026** — every ``memory.json`` a whole memory document (summaries and facts):
  ``memory.json`` (no user), ``agents/{agent}/memory.json`` (no user),
  ``users/{user}/memory.json``, ``users/{user}/agents/{agent}/memory.json``.
- **August 2026 (DeerMem v2)** — ``users/{user}/memory.json`` holds the user's summaries
  (``version "2.0"``, no facts), and each fact is a Markdown file
  ``users/{user}/agents/{agent}/facts/{xx}/{id}.md``: a ``---`` YAML front matter (``id``,
  ``category``, ``confidence``, ``createdAt``, ``source``, ``sourceError``, ``user_id``,
  ``agent_name``, …), a closing ``---``, a ``# title`` line, then the content. The agent
  ``__default__`` is the facts of no agent.

Where each goes: the memory ``(tenant, user, agent)`` of memory_sql, with ``--tenant`` (default
``default``), the user of the folder (``default`` for the folders without one; the ``user_id``
of the facts' front matter when present, since DeerFlow's folder name of a user id with other
characters than ``[A-Za-z0-9_-]`` is a digest of it), and the agent (none for ``__default__``
and for the user-level ``memory.json``). memory_sql keeps summaries per memory: the user-level
summaries of the August layout go to the user's memory without an agent and to each of the
user's agent memories, as DeerFlow showed them beside that agent's facts.

Everything is read and checked before anything is written (:func:`read_folder`): a file that
is not valid memory (bad JSON or YAML, a fact without content, a confidence of ``"high"``, a
fact id twice in one memory, a user id memory_sql cannot store, two sources of one memory) is a
problem, and with any problem nothing is written. What is not memory is skipped with the
reason: DeerMem's sidecars (``.metadata/``), journals and locks, temporary and backup files,
an agent's definition (``config.yaml``, ``SOUL.md``), a fact whose content another fact of the
memory already has (casefold; the more confident one is kept). :func:`import_folder` then
makes each memory hold what the folder holds, one transaction per memory, as ``memory-sql
import`` does for one file: importing the same folder again changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ... import ops
from ...errors import ImportFileError, MemorySQLError
from ...models import CATEGORY_PATTERN, Fact, MemoryDocument
from ...scope import AGENT_PATTERN, Scope
from ...storage import MemoryStorage

DEFAULT_AGENT_BUCKET = "__default__"
MEMORY_FILE = "memory.json"
_UNSAFE_USER_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_AGENT_DEFINITION = frozenset({"config.yaml", "config.yml", "soul.md", "agents.md"})


@dataclass(frozen=True)
class Finding:
    """A file (or folder) and what about it: why it was skipped, or what is wrong with it."""

    path: Path
    reason: str

    def describe(self, root: Path) -> str:
        try:
            shown = self.path.relative_to(root)
        except ValueError:
            shown = self.path
        return f"{shown}: {self.reason}"


@dataclass
class FolderMemory:
    """One memory the folder holds, and the files it comes from."""

    scope: Scope
    memory: MemoryDocument
    sources: list[Path] = field(default_factory=list)


@dataclass
class FolderPlan:
    """What :func:`read_folder` found: the memories, the files skipped, the problems."""

    root: Path
    memories: list[FolderMemory] = field(default_factory=list)
    skipped: list[Finding] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)

    @property
    def users(self) -> int:
        return len({m.scope.user_id for m in self.memories})

    @property
    def agents(self) -> int:
        """Distinct agent names (the memories without an agent not counted)."""
        return len({m.scope.agent_name for m in self.memories if m.scope.agent_name})

    @property
    def facts(self) -> int:
        return sum(len(m.memory.facts) for m in self.memories)


@dataclass(frozen=True)
class FolderImport:
    """What :func:`import_folder` did."""

    plan: FolderPlan
    changed: int

    @property
    def memories(self) -> int:
        return len(self.plan.memories)

    @property
    def unchanged(self) -> int:
        return self.memories - self.changed


class FolderError(MemorySQLError, ValueError):
    """The folder holds files that are not valid DeerFlow memory; nothing was written.

    ``problems`` lists each file and what is wrong with it."""

    def __init__(self, root: Path, problems: list[Finding]) -> None:
        self.root = root
        self.problems = problems
        first = problems[0].describe(root)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(
            f"{root}: {len(problems)} invalid DeerFlow memory "
            f"{'file' if len(problems) == 1 else 'files'}, nothing imported: {first}{more}"
        )


def safe_user_id(raw: str) -> str:
    """DeerFlow's folder name for the user id ``raw``: characters outside ``[A-Za-z0-9_-]``
    replaced by ``-`` and, if that changed anything, ``-`` and 16 hex digits of its SHA-256."""
    sanitized = _UNSAFE_USER_CHAR.sub("-", raw)
    if sanitized == raw:
        return raw
    return f"{sanitized}-{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:16]}"


# reading ---------------------------------------------------------------------------------------


def read_folder(root: str | Path, *, tenant_id: str | None = None) -> FolderPlan:
    """Read and check every memory of DeerFlow's folder ``root`` (see the module docstring);
    nothing is written. The plan's ``problems`` say what keeps it from being imported.

    Raises:
        InvalidScopeError: ``tenant_id`` is malformed.
        NotADirectoryError, FileNotFoundError: ``root`` is not a folder.
    """
    root = Path(root)
    tenant = Scope.of(tenant_id=tenant_id).tenant_id
    if not root.exists():
        raise FileNotFoundError(2, "No such file or directory", str(root))
    if not root.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(root))
    plan = FolderPlan(root=root)
    _read_user(plan, tenant, root, folder_user=None)
    users = root / "users"
    if users.is_dir():
        for folder in sorted(users.iterdir()):
            if not folder.is_dir():
                plan.skipped.append(Finding(folder, "not a user folder"))
            else:
                _read_user(plan, tenant, folder, folder_user=folder.name)
    _check_unique_scopes(plan)
    return plan


@dataclass
class _Bucket:
    """What one agent folder (or a June ``memory.json`` of no agent) holds."""

    agent: str | None
    facts: list[tuple[Fact, Path]] = field(default_factory=list)
    document: MemoryDocument | None = None
    """A June ``memory.json``: the whole memory, its own sections."""
    sources: list[Path] = field(default_factory=list)
    users: set[str] = field(default_factory=set)
    """The user ids its Markdown facts name in their front matter."""


def _read_user(plan: FolderPlan, tenant: str, base: Path, folder_user: str | None) -> None:
    problems_before = len(plan.problems)
    _skip_sidecars(plan, base)
    summaries: MemoryDocument | None = None
    summaries_file = base / MEMORY_FILE
    buckets: dict[str | None, _Bucket] = {}
    if summaries_file.is_file():
        data = _json(plan, summaries_file)
        document = _document(plan, summaries_file, data) if data is not None else None
        if document is not None and document.facts:
            # June: the memory of no agent, whole.
            buckets[None] = _Bucket(None, document=document, sources=[summaries_file])
        elif document is not None:
            summaries = document  # August (or a June file without facts): the summaries
    agents = base / "agents"
    if agents.is_dir():
        for folder in sorted(agents.iterdir()):
            bucket = _read_agent(plan, folder)
            if bucket is None:
                continue
            if bucket.agent in buckets:
                which = "of no agent" if bucket.agent is None else f"of agent {bucket.agent!r}"
                plan.problems.append(Finding(folder, f"a second source of the memory {which}"))
                continue
            buckets[bucket.agent] = bucket
    named = {user for bucket in buckets.values() for user in bucket.users}
    user_id = _user_id(plan, base, folder_user, named)
    if user_id is None or len(plan.problems) > problems_before:
        return
    if summaries is not None and None not in buckets:
        buckets[None] = _Bucket(None)
    for agent, bucket in buckets.items():
        try:
            scope = Scope.of(user_id=user_id, agent_name=agent, tenant_id=tenant)
        except ValueError as exc:
            named_user = getattr(exc, "field", None) == "user_id"
            where = base if named_user else base / "agents" / str(agent)
            plan.problems.append(Finding(where, f"cannot be stored in memory_sql: {exc}"))
            continue
        if bucket.document is not None:
            memory, sources = bucket.document, list(bucket.sources)
        else:
            memory = summaries.clone() if summaries is not None else MemoryDocument()
            memory.facts = _unique(plan, bucket.facts)
            sources = [summaries_file] if summaries is not None else []
            sources += bucket.sources
        plan.memories.append(FolderMemory(scope, memory, sources))


def _read_agent(plan: FolderPlan, folder: Path) -> _Bucket | None:
    """The memory of an agent folder; None when it holds none."""
    if not folder.is_dir():
        plan.skipped.append(Finding(folder, "not an agent folder"))
        return None
    name = folder.name
    if name == DEFAULT_AGENT_BUCKET:
        agent = None
    elif AGENT_PATTERN.fullmatch(name):
        agent = name.lower()
    else:
        plan.skipped.append(Finding(folder, "not an agent name DeerFlow uses ([A-Za-z0-9-]+)"))
        return None
    json_file = folder / MEMORY_FILE
    facts_dir = folder / "facts"
    if json_file.is_file() and facts_dir.is_dir():
        plan.problems.append(
            Finding(
                folder,
                f"holds both {MEMORY_FILE} (the June layout) and facts/ (the August layout); "
                "keep the one DeerFlow uses and import again",
            )
        )
        return None
    bucket = _Bucket(agent)
    for entry in sorted(folder.iterdir()):
        if entry == json_file:
            data = _json(plan, entry)
            document = _document(plan, entry, data) if data is not None else None
            if document is not None:
                bucket.document, bucket.sources = document, [entry]
        elif entry == facts_dir:
            _read_facts(plan, facts_dir, bucket)
        elif entry.name == ".metadata":
            plan.skipped.append(Finding(entry, "DeerMem's usage and audit sidecar, not memory"))
        elif entry.name.lower() in _AGENT_DEFINITION:
            plan.skipped.append(Finding(entry, "the agent's definition, not memory"))
        else:
            _skip_other(plan, entry)
    return bucket if bucket.document is not None or bucket.facts else None


def _read_facts(plan: FolderPlan, facts_dir: Path, bucket: _Bucket) -> None:
    for path in sorted(p for p in facts_dir.rglob("*") if p.is_file()):
        if path.suffix != ".md":
            _skip_other(plan, path)
            continue
        read = _fact_file(plan, path)
        if read is not None:
            fact, user = read
            bucket.facts.append((fact, path))
            if user is not None:
                bucket.users.add(user)
    bucket.sources.append(facts_dir)


def _skip_sidecars(plan: FolderPlan, base: Path) -> None:
    """Report the files beside a ``memory.json`` that are not memory (the rest of a DeerFlow
    state folder — threads, uploads, channels — is not looked at)."""
    for entry in sorted(base.iterdir()):
        name = entry.name
        if name in (".memory.journal.json",) or name.endswith(".journal.json"):
            plan.skipped.append(
                Finding(
                    entry,
                    "a journal of an unfinished DeerFlow write, not memory (start DeerFlow once "
                    "to apply it, then import again)",
                )
            )
        elif name.startswith((MEMORY_FILE, ".memory")) and name != MEMORY_FILE:
            _skip_other(plan, entry)


def _skip_other(plan: FolderPlan, entry: Path) -> None:
    name = entry.name
    if name.endswith(".tmp"):
        reason = "a temporary file of an unfinished write, not memory"
    elif name.endswith(".bak"):
        reason = "a backup DeerFlow made while migrating, not memory"
    elif name.endswith(".lock"):
        reason = "a lock file, not memory"
    elif name.endswith(".journal.json"):
        reason = "a journal, not memory"
    else:
        reason = "not a memory file"
    plan.skipped.append(Finding(entry, reason))


def _json(plan: FolderPlan, path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except json.JSONDecodeError as exc:
        plan.problems.append(Finding(path, f"not JSON: {exc.msg} (line {exc.lineno})"))
        return None
    except UnicodeDecodeError as exc:
        plan.problems.append(Finding(path, f"not UTF-8 text: {exc.reason}"))
        return None
    except OSError as exc:
        plan.problems.append(Finding(path, f"cannot be read: {exc.strerror or exc}"))
        return None
    if not isinstance(data, dict):
        plan.problems.append(Finding(path, f"a memory must be a JSON object, not {_kind(data)}"))
        return None
    return data


def _document(plan: FolderPlan, path: Path, data: dict[str, Any]) -> MemoryDocument | None:
    """The memory document of a ``memory.json``, its facts de-duplicated."""
    facts = data.get("facts")
    if facts is not None and not isinstance(facts, list):
        plan.problems.append(Finding(path, f"facts must be a list, not {_kind(facts)}"))
        return None
    try:
        document = MemoryDocument.from_deerflow({**data, "facts": []})
    except ValidationError as exc:
        plan.problems.append(Finding(path, ops.describe_validation_error(exc)))
        return None
    parsed: list[tuple[Fact, Path]] = []
    for index, raw in enumerate(facts or []):
        fact = _fact(plan, path, raw, where=f"facts[{index}]")
        if fact is not None:
            parsed.append((fact, path))
    document.facts = _unique(plan, parsed)
    return document


def _fact_file(plan: FolderPlan, path: Path) -> tuple[Fact, str | None] | None:
    """The fact of an August Markdown file, and the user id its front matter names."""
    try:
        text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        plan.problems.append(Finding(path, f"not UTF-8 text: {exc.reason}"))
        return None
    except OSError as exc:
        plan.problems.append(Finding(path, f"cannot be read: {exc.strerror or exc}"))
        return None
    front, separator, body = text[4:].partition("\n---\n")
    if not text.startswith("---\n") or not separator:
        plan.problems.append(Finding(path, "no YAML front matter between --- lines"))
        return None
    try:
        metadata = yaml.safe_load(front) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        plan.problems.append(Finding(path, f"invalid YAML front matter{where}: {problem}"))
        return None
    if not isinstance(metadata, dict):
        plan.problems.append(Finding(path, "the front matter is not a mapping"))
        return None
    lines = body.lstrip("\n").split("\n")
    if lines[0].startswith("# "):
        lines.pop(0)  # the title, DeerMem's first line of the content
    if metadata.get("id") is not None and str(metadata["id"]) != path.stem:
        plan.problems.append(
            Finding(path, f"id {metadata['id']!r} does not match the file name {path.name!r}")
        )
        return None
    status = metadata.get("status", "active")
    if status != "active":
        plan.skipped.append(Finding(path, f"a fact with status {status!r}, not active"))
        return None
    raw = {key: value for key, value in metadata.items() if key not in ("content", "title")}
    raw.setdefault("id", path.stem)
    raw["content"] = "\n".join(lines).strip()
    fact = _fact(plan, path, raw, where=None)
    if fact is None:
        return None
    user = metadata.get("user_id")
    return fact, user if isinstance(user, str) and user else None


def _fact(plan: FolderPlan, path: Path, raw: Any, *, where: str | None) -> Fact | None:
    label = f"{where}: " if where else ""
    if not isinstance(raw, dict):
        plan.problems.append(Finding(path, f"{label}a fact must be an object, not {_kind(raw)}"))
        return None
    data = dict(raw)
    if not isinstance(data.get("content"), str) or not data["content"].strip():
        plan.problems.append(Finding(path, f"{label}a fact without content"))
        return None
    extension = data.get("categoryExtension")
    if (
        data.get("category") == "other"
        and isinstance(extension, str)
        and CATEGORY_PATTERN.fullmatch(extension.strip().lower())
    ):
        data["category"] = extension  # DeerMem stores categories it does not know as other
    for name in ("createdAt", "updatedAt"):
        if name in data and not isinstance(data[name], (str, type(None))):
            data[name] = data[name].isoformat() if hasattr(data[name], "isoformat") else data[name]
    try:
        return Fact.model_validate(data)
    except ValidationError as exc:
        problem = ops.describe_validation_error(exc)
        plan.problems.append(Finding(path, f"{label}{problem}"))
        return None


def _unique(plan: FolderPlan, facts: Iterable[tuple[Fact, Path]]) -> list[Fact]:
    """The facts, each content once (casefold): the more confident kept, then the older;
    a fact id twice is a problem."""
    facts = list(facts)
    ids: dict[str, Path] = {}
    for fact, path in facts:
        if fact.id in ids:
            plan.problems.append(Finding(path, f"fact id {fact.id!r} appears twice"))
        ids.setdefault(fact.id, path)
    best: dict[str, tuple[Fact, Path]] = {}
    for fact, path in facts:
        held = best.get(fact.key)
        if held is None or (fact.confidence, -fact.created_at.timestamp()) > (
            held[0].confidence,
            -held[0].created_at.timestamp(),
        ):
            best[fact.key] = (fact, path)
    kept: list[Fact] = []
    for fact, path in facts:
        winner = best[fact.key][0]
        if winner is fact:
            kept.append(fact)
        else:
            plan.skipped.append(
                Finding(path, f"fact {fact.id} duplicates fact {winner.id} (casefold match)")
            )
    return kept


def _user_id(plan: FolderPlan, base: Path, folder_user: str | None, named: set[str]) -> str | None:
    if len(named) > 1:
        plan.problems.append(
            Finding(base, f"facts name different users in their front matter: {sorted(named)}")
        )
        return None
    if folder_user is None:
        if named and named != {"default"}:
            plan.problems.append(
                Finding(base, f"facts of the folder without a user name user {named.pop()!r}")
            )
            return None
        return "default"
    if named:
        raw = next(iter(named))
        if safe_user_id(raw) != folder_user:
            plan.problems.append(
                Finding(base, f"facts name user {raw!r}, whose folder is {safe_user_id(raw)!r}")
            )
            return None
        return raw
    return folder_user


def _check_unique_scopes(plan: FolderPlan) -> None:
    first: dict[Scope, FolderMemory] = {}
    kept = []
    for memory in plan.memories:
        earlier = first.get(memory.scope)
        if earlier is not None:
            plan.problems.append(
                Finding(
                    memory.sources[0] if memory.sources else plan.root,
                    f"memory {memory.scope} also comes from "
                    f"{earlier.sources[0] if earlier.sources else plan.root}: move one away",
                )
            )
            continue
        first[memory.scope] = memory
        kept.append(memory)
    plan.memories = kept


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


# writing ---------------------------------------------------------------------------------------


def import_folder(
    storage: MemoryStorage,
    plan: FolderPlan,
    *,
    progress: Callable[[FolderMemory], None] | None = None,
) -> FolderImport:
    """Make each memory of ``plan`` hold what the folder holds (sections, facts with their
    ids, creation times and sources), one save per memory; ``progress`` is called after each.

    Raises:
        FolderError: the plan has problems; nothing was written.
        StorageError, VersionConflictError (after retrying): a memory could not be saved;
            those before it are saved, and importing again completes the rest.
    """
    if plan.problems:
        raise FolderError(plan.root, plan.problems)
    changed = 0
    for item in plan.memories:
        source = str(item.sources[0]) if item.sources else str(plan.root)
        try:
            before, after = ops.import_memory(
                storage,
                item.memory.to_deerflow(),
                user_id=item.scope.user_id,
                agent_name=item.scope.agent_name,
                tenant_id=item.scope.tenant_id,
                source=source,
            )
        except ImportFileError as exc:  # read_folder checked it: not expected
            raise FolderError(plan.root, [Finding(Path(source), exc.problem)]) from None
        changed += before != after
        if progress is not None:
            progress(item)
    return FolderImport(plan=plan, changed=changed)


def summary(result: FolderImport) -> list[str]:
    """What an import did, as lines for the command line."""
    plan = result.plan
    lines = [
        f"imported {_plural(result.memories, 'memory', 'memories')} from {plan.root}: "
        f"{_plural(plan.users, 'user')}, {_plural(plan.agents, 'agent')}, "
        f"{_plural(plan.facts, 'fact')}; {result.changed} changed, {result.unchanged} unchanged",
    ]
    if plan.skipped:
        lines.append(f"skipped {len(plan.skipped)}:")
        lines.extend(f"  {finding.describe(plan.root)}" for finding in plan.skipped)
    return lines


def _plural(count: int, noun: str, many: str | None = None) -> str:
    return f"{count} {noun if count == 1 else many or noun + 's'}"
