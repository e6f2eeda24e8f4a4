"""The storage and the queue's database a :class:`~memory_sql.config.MemoryConfig` names, opened.

``storage`` is a database URL (the SQL store, whose database also holds the queue), a folder
(the JSON-file store, with the queue in a SQLite file :data:`QUEUE_FILE` in it), or a class
(``storage_class``, built with ``storage`` as its one argument when one was given). A new
(or empty) SQLite database gets the schema; any other only with ``auto_migrate``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import Engine

from .. import migrations
from ..config import MemoryConfig
from ..database import create_engine
from . import load_storage_class
from .base import MemoryStorage
from .file import FileStorage
from .sql import SQLStorage

QUEUE_FILE = "queue.db"


def open_configured(config: MemoryConfig, owned: list[Engine]) -> MemoryStorage:
    """The storage ``config`` names; an engine it opens is appended to ``owned`` (the caller
    disposes of it).

    Raises:
        SchemaOutOfDateError: the database is not at the schema head and is left as it is.
        StorageError: the database cannot be reached.
        ValueError: the storage class cannot be imported or is no MemoryStorage.
    """
    if config.storage_class:
        # storage: {use: pkg.module:Class, url: …} builds Class(url); without a url, Class().
        cls = load_storage_class(config.storage_class)
        given = "storage" in config.model_fields_set
        build: Callable[..., MemoryStorage] = cls  # a subclass may take the location
        return build(config.storage) if given else build()
    target = config.storage
    if "://" not in target and not target.startswith("sqlite:"):
        return FileStorage(target)
    engine = create_engine(
        target,
        pool_size=max(5, config.queue.workers + 3),
        prepare_threshold=config.database.prepare_threshold,
    )
    owned.append(engine)
    try:
        # A new SQLite file gets the schema; anything else only with auto_migrate.
        migrations.prepare_schema(engine, auto_migrate=config.auto_migrate)
    except BaseException:
        engine.dispose()
        raise
    return SQLStorage(engine)


def queue_engine_for(storage: MemoryStorage, owned: list[Engine]) -> Engine:
    """The database of the queue beside ``storage``: the SQL store's own, else a SQLite file
    :data:`QUEUE_FILE` in the JSON-file store's folder (or the working directory), migrated
    here; an engine it opens is appended to ``owned``."""
    if isinstance(storage, SQLStorage):
        return storage.engine
    folder = Path(storage.root) if isinstance(storage, FileStorage) else Path()
    path = folder / QUEUE_FILE
    engine = create_engine(f"sqlite:///{path}")
    owned.append(engine)
    migrations.upgrade(engine)
    return engine
