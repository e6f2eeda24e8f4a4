"""Writes to other tables that commit with a memory's save, or not at all: :class:`WithTheSave`.

An update run completes its queue row and records its LLM call in the transaction that saves
the memory, so that a conversation takes effect exactly once. Such a write comes in two forms,
and :meth:`SQLStorage.save(in_transaction=…) <memory_sql.storage.SQLStorage.save>` picks one:

- ``write(connection)``, run inside the save's transaction after the memory's rows (any
  database; what it raises rolls the save back);
- on PostgreSQL, parts of the save's one statement (data-modifying CTEs, see
  :mod:`memory_sql.storage.sql`): ``requires``, named ``SELECT … FOR UPDATE`` parts the
  memory's version claim needs a row of (one that finds none leaves the whole statement
  writing nothing: the save then takes its transaction, where ``write`` raises what went
  wrong), and ``ctes``, writes
  gated on the claim (``WHERE EXISTS (SELECT FROM head)``), their values in ``parameters``
  (named with a prefix of their own). ``ctes`` None: no statement form.

``saved()`` is called once the save has committed the writes, whichever form it took.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

json_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
"""Rows as one JSON parameter of a statement: compact, and exact for every float (repr, which
PostgreSQL's float8 input reads back as the same double); Unicode as it is."""


def json_ready(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with their timestamps as ISO text (JSON has no time)."""
    return {n: v.isoformat() if isinstance(v, datetime) else v for n, v in values.items()}


@dataclass(frozen=True)
class WithTheSave:
    """What commits with a save (module docstring). ``a + b``: both, ``a``'s first."""

    write: Callable[[Any], object] | None = None
    ctes: tuple[str, ...] | None = ()
    requires: tuple[tuple[str, str], ...] = ()
    """(name, ``SELECT … FOR UPDATE``) pairs."""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    saved: Callable[[], object] | None = None

    @property
    def in_one_statement(self) -> bool:
        """Whether its writes have the one-statement form."""
        return self.ctes is not None

    def write_on(self, connection: Any) -> None:
        """The transactional form: the writes on the save's ``connection``."""
        if self.write is not None:
            self.write(connection)

    def committed(self) -> None:
        if self.saved is not None:
            self.saved()

    def __add__(self, other: WithTheSave) -> WithTheSave:
        clash = self.parameters.keys() & other.parameters.keys()
        if clash:
            raise ValueError(f"writes with the save share parameter names: {sorted(clash)}")
        first, then = self, other

        def write(connection: Any) -> None:
            first.write_on(connection)
            then.write_on(connection)

        def saved() -> None:
            first.committed()
            then.committed()

        return WithTheSave(
            write=write,
            ctes=None if self.ctes is None or other.ctes is None else (*self.ctes, *other.ctes),
            requires=(*self.requires, *other.requires),
            parameters={**self.parameters, **other.parameters},
            saved=saved,
        )


def with_the_save(what: Callable[[Any], object] | WithTheSave | None) -> WithTheSave | None:
    """``what`` as a :class:`WithTheSave` (a plain callable: its transactional form alone)."""
    if what is None or isinstance(what, WithTheSave):
        return what
    return WithTheSave(write=what, ctes=None)
