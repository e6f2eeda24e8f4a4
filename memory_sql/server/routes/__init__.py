"""The routes, one module per group; helpers every group uses are here.

Every route under ``/v1`` takes its tenant from the caller's key (:mod:`..auth`) and does its
database work inside ``caller.acting()``. A user or memory of another tenant is answered
exactly as one that does not exist (404), so nothing tells whether it exists elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Header, Query

from ...errors import VersionConflictError
from ..errors import ApiError

AgentQuery = Annotated[
    str | None,
    Query(description="The agent whose memory it is; leave out for the unnamed agents' memory."),
]
IfMatch = Annotated[
    str | None,
    Header(description='The memory version the change is based on, as its ETag ("7").'),
]

_VERSION_TAG = re.compile(r'\s*(?:W/)?"?(\d{1,12})"?\s*')


def etag(version: int) -> dict[str, str]:
    """The ETag header of a memory at ``version``."""
    return {"ETag": f'"{version}"'}


def expected_version(if_match: str | None) -> int | None:
    """The version an ``If-Match`` header names; None when there is none (or it is ``*``)."""
    if if_match is None or if_match.strip() == "*":
        return None
    match = _VERSION_TAG.fullmatch(if_match)
    if match is None:
        raise ApiError(
            400,
            "invalid_request",
            f'If-Match must be a memory version as its ETag gives it ("7"), not {if_match!r}',
        )
    return int(match.group(1))


def stale(expected: int, actual: int | None) -> ApiError:
    """412 for a change based on a version that is no longer the memory's."""
    now = f"it is now {actual}" if actual is not None else "it has changed"
    return ApiError(
        412,
        "precondition_failed",
        f"the memory is no longer at version {expected} ({now}): read it again and retry",
    )


@contextmanager
def precondition(expected: int | None) -> Iterator[None]:
    """A change based on ``expected`` (an ``If-Match``): a version conflict answers 412; without
    one, the library retried on the newest version and a conflict left is a 409."""
    try:
        yield
    except VersionConflictError as exc:
        if expected is None:
            raise
        raise stale(expected, exc.actual) from None
