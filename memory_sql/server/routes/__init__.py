"""The routes, one module per group; helpers every group uses are here.

Every route under ``/v1`` takes its tenant from the caller's key (:mod:`..auth`) and does its
database work inside ``caller.acting()``. A user or memory of another tenant is answered
exactly as one that does not exist (404), so nothing tells whether it exists elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Annotated, TypeVar

from fastapi import Header, Query

from ... import ops
from ...errors import VersionConflictError
from ...scope import Scope
from ..auth import Caller
from ..errors import ApiError
from ..reads import ReadTarget
from ..state import ServerState

R = TypeVar("R")

AgentQuery = Annotated[
    str | None,
    Query(description="The agent whose memory it is; leave out for the unnamed agents' memory."),
]
AsOfQuery = Annotated[
    datetime | None,
    Query(
        description="Read the past: the facts believed at this moment (ISO 8601; without a "
        "zone, UTC). Sections have no history and are today's."
    ),
]
IfMatch = Annotated[
    str | None,
    Header(description='The memory version the change is based on, as its ETag ("7").'),
]

MinVersionHeader = Annotated[
    str | None,
    Header(
        alias="Min-Version",
        description='The memory version the caller holds (as its ETag, "7", or 7): the read '
        "answers from a database that has it (docs/replication.md).",
    ),
]
MinVersionQuery = Annotated[
    int | None,
    Query(
        alias="min_version",
        ge=0,
        description="The Min-Version header's value, as a query parameter.",
    ),
]

_ENTITY_TAG = re.compile(r'\s*(W/)?"(\d{1,12})"\s*')
ANY_VERSION = -1
"""What ``If-Match: *`` expects: the memory exists, whatever its version."""


def as_utc(moment: datetime) -> datetime:
    """``moment`` with a zone (a naive one is UTC)."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def etag(version: int) -> dict[str, str]:
    """The ETag header of a memory at ``version``."""
    return {"ETag": f'"{version}"'}


def expected_version(if_match: str | None) -> int | None:
    """The version an ``If-Match`` header names (a strong tag ``"7"``; ``7`` is taken too);
    :data:`ANY_VERSION` for ``*``; None without the header. A weak tag cannot match (RFC 9110
    compares If-Match strongly); a list matches if the memory is at any of its versions, so
    only a list of one is taken here."""
    if if_match is None:
        return None
    text = if_match.strip()
    if text == "*":
        return ANY_VERSION
    if text.isdigit() and len(text) <= 12:
        return int(text)
    match = _ENTITY_TAG.fullmatch(text)
    if match is None or match.group(1):
        raise ApiError(
            400,
            "invalid_request",
            f'If-Match must be one memory version as its ETag gives it ("7"), not {if_match!r}',
        )
    return int(match.group(2))


def min_version(header: str | None, query: int | None) -> int | None:
    """The version a reader holds, from its ``Min-Version`` header or ``min_version``
    parameter (the higher of the two when both are given); None without either."""
    held = query
    if header is not None:
        version = expected_version(header)
        if version is None or version == ANY_VERSION:
            raise ApiError(400, "invalid_request", f"Min-Version must be a version, not {header!r}")
        held = version if held is None else max(held, version)
    return held


def replica_read(
    state: ServerState,
    call: Callable[[ReadTarget], R],
    *,
    held: int | None = None,
    version_of: Callable[[R], int | None] | None = None,
) -> R:
    """``call`` on the read replica when it is within its lag bound and has the version the
    reader holds (``held``; checked with ``version_of``), else on the primary (see
    :class:`~memory_sql.server.reads.Reads`)."""
    return state.reading.read(call, min_version=held, version_of=version_of)


def stale(expected: int, actual: int | None) -> ApiError:
    """412 for a change based on a version that is no longer the memory's."""
    if expected == ANY_VERSION:
        return ApiError(412, "precondition_failed", "If-Match: * but there is no such memory")
    now = f"it is now {actual}" if actual is not None else "it has changed"
    return ApiError(
        412,
        "precondition_failed",
        f"the memory is no longer at version {expected} ({now}): read it again and retry",
    )


@contextmanager
def precondition(
    if_match: str | None, state: ServerState, caller: Caller, scope: Scope
) -> Iterator[int | None]:
    """A change of ``scope``'s memory, made in the block, acting for the caller, based on the
    version ``if_match`` names (:func:`expected_version`); yields the version to pass as
    ``expected_version``. ``*`` needs the memory to exist. A version conflict answers 412 with
    an ``If-Match``; without one, the library retried on the newest version and a conflict left
    is a 409. Either is counted in the metrics."""
    expected = expected_version(if_match)
    with caller.acting():
        if expected == ANY_VERSION and not ops.memory_exists(
            state.storage, scope.user_id, agent_name=scope.agent_name, tenant_id=scope.tenant_id
        ):
            raise stale(ANY_VERSION, None)
        try:
            yield None if expected == ANY_VERSION else expected
        except VersionConflictError as exc:
            state.metrics.version_conflicts.labels("api").inc()
            if expected is None:
                raise
            raise stale(expected, exc.actual) from None
