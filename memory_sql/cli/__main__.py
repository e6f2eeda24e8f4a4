"""``python -m memory_sql.cli``: the ``memory-sql`` command."""

from __future__ import annotations

from . import main

main()
