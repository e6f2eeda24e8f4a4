"""Storage: where memories are kept, behind one contract (:class:`MemoryStorage`).

In: a memory document and the version it was read at. Out: the document as stored, at its next
version, or a conflict. :func:`open_storage` picks the backend (SQL, or a folder of JSON files).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from sqlalchemy.engine import Engine

from ..database import resolve_url
from .base import MemoryStorage
from .file import FileStorage
from .sql import SQLStorage


def open_storage(target: str | os.PathLike[str] | Engine | None = None) -> MemoryStorage:
    """The storage for ``target``.

    - a URL (anything with ``://``): the SQL store for ``sqlite:///path.db`` or
      ``postgresql+psycopg://user@host/db`` (or an ``Engine``); any other URL is refused. A
      new (or empty) SQLite database is brought to the schema head on the spot; any other
      must be at head already (``memory-sql db upgrade``, :func:`memory_sql.upgrade`; see
      :mod:`memory_sql.migrations`).
    - ``use:package.module:ClassName``: that :class:`MemoryStorage` subclass, built with no
      arguments (the seed's ``storage: {use: …}``).
    - any other string or path: a folder for the JSON-file store (created if missing).
    - ``None``: ``$MEMORY_SQL_DATABASE_URL``, else ``sqlite:///memory_sql.db``.

    Raises:
        SchemaOutOfDateError: the database is not at the schema head.
        ValueError: an unsupported URL, or ``use:`` names no MemoryStorage class.
    """
    if target is None or isinstance(target, Engine):
        return SQLStorage(target if target is not None else resolve_url(None))
    text = os.fspath(target)
    if "://" in text or text.startswith("sqlite:"):
        return SQLStorage(resolve_url(text))
    if text.startswith("use:"):
        return load_storage_class(text[4:])()
    return FileStorage(Path(text))


def load_storage_class(path: str) -> type[MemoryStorage]:
    """The :class:`MemoryStorage` subclass ``path`` names (``package.module:ClassName``)."""
    module_name, _, attr = path.strip().partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"storage use: {path!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, MemoryStorage)):
        raise ValueError(f"storage use: {path!r} is not a MemoryStorage subclass")
    return cls


__all__ = ["FileStorage", "MemoryStorage", "SQLStorage", "load_storage_class", "open_storage"]
