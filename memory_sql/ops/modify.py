"""One memory read, changed in place and saved at the version read, retried on a conflict.

The fact edits and the imports change memories through :func:`modify`, on any backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from ..errors import (
    VersionConflictError,
)
from ..models import (
    MemoryDocument,
)
from ..scope import Scope
from ..storage import MemoryStorage

SAVE_ATTEMPTS = 5
"""How many times a read-modify-save is tried before a version conflict is raised."""


def modify(
    storage: MemoryStorage,
    scope: Scope,
    change: Callable[[MemoryDocument], Any],
    expected_version: int | None = None,
) -> int:
    """Load, ``change`` in place, save with the version loaded; retried on a version conflict,
    unless ``expected_version`` is given: then the memory must be at it, and a conflict is
    raised at once. Returns the version saved (the one loaded when nothing changed)."""
    kwargs = scope.arguments()
    attempts = SAVE_ATTEMPTS if expected_version is None else 1
    for attempt in range(1, attempts + 1):
        doc = storage.load(**kwargs)
        if expected_version is not None and doc.version != expected_version:
            raise VersionConflictError(str(scope), expected_version, doc.version)
        change(doc)
        try:
            return storage.save(doc, **kwargs, expected_version=doc.version)
        except VersionConflictError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def describe_validation_error(exc: ValidationError) -> str:
    """A pydantic error as one line: ``facts[0].confidence: Input should be a valid number``."""
    parts = []
    for error in exc.errors():
        where = ""
        for item in error["loc"]:
            where += f"[{item}]" if isinstance(item, int) else (f".{item}" if where else str(item))
        message = error["msg"].removeprefix("Value error, ")
        if error.get("input") is not None and error["type"] not in ("missing", "dict_type"):
            message += f" (got {str(error['input'])[:40]!r})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
