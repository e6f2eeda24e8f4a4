"""A bounded, thread-safe cache of loaded documents, each valid while its stamp is current."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from ..models import MemoryDocument
from ..scope import Scope

DEFAULT_CACHE_SCOPES = 1024


class DocumentCache:
    """The last ``max_scopes`` documents used, least recently used evicted first.

    A backend stores each document with a *stamp* (what proves it is still what is stored: a
    version and creation time, or a file's mtime and size) and serves it only while a fresh
    stamp is equal. Cached documents are never handed out: callers get :meth:`clone` copies.
    """

    def __init__(self, max_scopes: int = DEFAULT_CACHE_SCOPES) -> None:
        if max_scopes < 0:
            raise ValueError(f"max_scopes must be >= 0, not {max_scopes}")
        self.max_scopes = max_scopes
        self._entries: OrderedDict[Scope, tuple[Hashable, MemoryDocument]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, scope: Scope, stamp: Hashable) -> MemoryDocument | None:
        """The cached document of ``scope`` if it was stored with ``stamp``."""
        with self._lock:
            entry = self._entries.get(scope)
            if entry is None or entry[0] != stamp:
                return None
            self._entries.move_to_end(scope)
            return entry[1]

    def latest(self, scope: Scope) -> tuple[Hashable, MemoryDocument] | None:
        """The cached stamp and document of ``scope``, whatever the stamp (the caller must
        make its use conditional on that stamp still being current)."""
        with self._lock:
            return self._entries.get(scope)

    def put(self, scope: Scope, stamp: Hashable, doc: MemoryDocument) -> None:
        if self.max_scopes == 0:
            return
        with self._lock:
            self._entries[scope] = (stamp, doc)
            self._entries.move_to_end(scope)
            while len(self._entries) > self.max_scopes:
                self._entries.popitem(last=False)

    def drop(self, scope: Scope) -> None:
        with self._lock:
            self._entries.pop(scope, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
