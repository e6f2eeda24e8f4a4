"""The JSON-file store: DeerFlow's design, kept as the baseline and for setups with no database.

One ``memory.json`` per scope at ``{root}/{tenant}/{user}/{agent or _default}/memory.json``, in
DeerFlow's shape with the version as ``revision``. Writes go to a temporary file in the same
folder, are fsynced and atomically renamed over the old file, then the folder is fsynced. Loads
are served from a per-process cache while the file's mtime, ctime, size and inode are unchanged.

The version check and the write are atomic between threads of one process, not between
processes: two processes saving one scope at once can both pass the check and the later rename
wins, losing the other's change. Use the SQL store for more than one process.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path
from typing import ClassVar

from pydantic import ValidationError

from ..errors import StorageError, VersionConflictError
from ..models import MemoryDocument, utcnow
from ..scope import Scope
from .base import MemoryStorage, apply_changes, check_duplicates, diff_documents, sort_facts
from .cache import DEFAULT_CACHE_SCOPES, DocumentCache
from .capabilities import Capability

DEFAULT_AGENT_DIR = "_default"  # an agent name never contains "_"
_LOCK_STRIPES = 64


def _stamp(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)


class FileStorage(MemoryStorage):
    """:class:`MemoryStorage` on a folder of ``memory.json`` files (see the module docstring)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    """None beyond the contract: no update queue, history, LLM budgets, watermarks, index or
    cross-memory operations (each raises :class:`~memory_sql.errors.CapabilityMissingError`);
    ranked recall scores the loaded memory in Python."""

    def __init__(
        self, root: str | os.PathLike[str], *, cache_scopes: int = DEFAULT_CACHE_SCOPES
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._cache = DocumentCache(cache_scopes)
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]

    def __repr__(self) -> str:
        return f"FileStorage({str(self.root)!r})"

    def path(self, scope: Scope) -> Path:
        return (
            self.root
            / scope.tenant_id
            / scope.user_id
            / (scope.agent_name or DEFAULT_AGENT_DIR)
            / "memory.json"
        )

    def _lock(self, scope: Scope) -> threading.Lock:
        return self._locks[hash(scope) % _LOCK_STRIPES]

    def _load(self, scope: Scope) -> MemoryDocument:
        return self._current(scope).clone()

    def _current(self, scope: Scope) -> MemoryDocument:
        path = self.path(scope)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return MemoryDocument()
        except OSError as exc:
            raise StorageError(f"memory {scope}: cannot read {path}: {exc}") from exc
        stamp = _stamp(stat)
        cached = self._cache.get(scope, stamp)
        if cached is not None:
            return cached
        try:
            data = json.loads(path.read_bytes())
            doc = MemoryDocument.model_validate(data)
            doc.version = int(data.get("revision", 0))
        except FileNotFoundError:
            return MemoryDocument()
        except (OSError, ValueError, ValidationError) as exc:
            raise StorageError(f"memory {scope}: {path} is unreadable or corrupt: {exc}") from exc
        doc.facts = sort_facts(doc.facts)
        self._cache.put(scope, stamp, doc)
        return doc

    def _save(self, scope: Scope, doc: MemoryDocument, expected_version: int) -> int:
        check_duplicates(scope, doc)
        with self._lock(scope):
            base = self._current(scope)
            if base.version != expected_version:
                raise VersionConflictError(
                    str(scope), expected_version, base.version if base.version else None
                )
            now = utcnow()
            changes = diff_documents(base, doc, now)
            if not changes:
                return expected_version
            stored = apply_changes(base, changes, expected_version + 1, now)
            self._write(scope, stored)
        return stored.version

    def _write(self, scope: Scope, doc: MemoryDocument) -> None:
        path = self.path(scope)
        text = json.dumps(doc.to_deerflow(), ensure_ascii=False, indent=2)
        tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            stat = path.stat()
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"memory {scope}: cannot write {path}: {exc}") from exc
        self._cache.put(scope, _stamp(stat), doc)
