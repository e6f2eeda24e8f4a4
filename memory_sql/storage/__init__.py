"""Storage backends behind one contract (:class:`MemoryStorage`), chosen by :func:`open_storage`."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from sqlalchemy.engine import Engine

from .base import MemoryStorage
from .file import FileStorage
from .sql import SQLStorage

_SQL_PREFIXES = ("sqlite:", "postgresql:", "postgresql+", "postgres:")


def open_storage(target: str | os.PathLike[str] | Engine | None = None) -> MemoryStorage:
    """The storage for ``target``.

    - ``sqlite:///path.db`` or ``postgresql+psycopg://user@host/db`` (or an ``Engine``): the SQL
      store; the database must be migrated (``memory-sql db upgrade``).
    - ``use:package.module:ClassName``: that :class:`MemoryStorage` subclass, built with no
      arguments (the seed's ``storage: {use: …}``).
    - any other string or path: a folder for the JSON-file store (created if missing).
    - ``None``: ``$MEMORY_SQL_DATABASE_URL``, else ``sqlite:///memory_sql.db``.

    Raises:
        SchemaOutOfDateError: the database is not at the schema head.
        ValueError: ``use:`` names something that is not a MemoryStorage class.
    """
    if target is None or isinstance(target, Engine):
        return SQLStorage(target if target is not None else _default_url())
    text = os.fspath(target)
    if text.startswith(_SQL_PREFIXES):
        return SQLStorage(text)
    if text.startswith("use:"):
        return _load_class(text[4:])()
    return FileStorage(Path(text))


def _default_url() -> str:
    from ..database import DEFAULT_DATABASE_URL, URL_ENV

    return os.environ.get(URL_ENV) or DEFAULT_DATABASE_URL


def _load_class(path: str) -> type[MemoryStorage]:
    module_name, _, attr = path.strip().partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"storage use: {path!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, MemoryStorage)):
        raise ValueError(f"storage use: {path!r} is not a MemoryStorage subclass")
    return cls


__all__ = ["FileStorage", "MemoryStorage", "SQLStorage", "open_storage"]
