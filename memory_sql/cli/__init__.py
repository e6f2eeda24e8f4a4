"""The ``memory-sql`` command line: a thin skin over the library, one module per group."""

from __future__ import annotations

from . import db, demo, facts, keys, llm, queue, report, run, serve, transfer  # noqa: F401  (importing registers)
from ._common import app


def main() -> None:
    """Entry point of the ``memory-sql`` script."""
    app()


__all__ = ["app", "main"]
