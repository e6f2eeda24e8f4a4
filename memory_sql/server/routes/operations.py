"""``/healthz`` (the process answers), ``/readyz`` (it can take conversations: the database
answers and is at the schema head, or is away while the spool has room) and ``/metrics``
(Prometheus). None needs a key; none shows a tenant's data.

An orchestrator restarts a process whose ``/healthz`` fails and stops routing to one whose
``/readyz`` fails. While the database is away the process still takes conversations into its
spool: ``/readyz`` stays 200 (with a ``Warning``) until the spool holds
:data:`READY_SPOOL_FRACTION` of its bound, then 503, before any conversation would be
refused.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request, Response

from ... import migrations
from ...driver_errors import is_unavailable
from ...errors import StorageError
from ..errors import ApiError, warning_header
from ..metrics import CONTENT_TYPE
from ..state import State

router = APIRouter(tags=["operations"])
logger = logging.getLogger("memory_sql.server")


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


READY_SPOOL_FRACTION = 0.9
"""While the database is away, ready until the spool holds this share of its bound."""


@router.get(
    "/readyz",
    summary="Ready to take conversations",
    description="200 when the database answers and its schema is at the head. While the "
    "database is away, still 200 (conversations are spooled, `database` is `unavailable`, "
    "and a `warning`, also a `Warning` header, says so) until the spool holds 90 % of its "
    "bound (`spool_max_conversations`); then, or with no spool, 503 `database_unavailable`. "
    "A database that answers and refuses the service's statements (a permission taken "
    "away) is no outage to spool through: 503 `database_refused`. "
    "With no memory LLM model configured the service is ready all the same (conversations "
    "are kept), and the `warning` says that updates wait until one is. `/healthz` says only "
    "that the process answers.",
)
def readyz(state: State, request: Request, response: Response) -> dict[str, Any]:
    head = state.head_revision
    try:
        current = migrations.current_revision(state.engine)
    except StorageError as exc:
        if not is_unavailable(exc):
            request_id = getattr(request.state, "request_id", "-")
            logger.error("not ready, the database refuses: %s", " ".join(str(exc).split()))
            raise ApiError(
                503,
                "database_refused",
                f"the database refuses the service's statements (request id {request_id})",
            ) from exc
        return _spooling(state, response, exc)
    if current != head:
        raise ApiError(
            503,
            "schema_out_of_date",
            f"the database is at revision {current}, not {head}: run memory-sql db upgrade",
        )
    answer = {"status": "ready", "revision": current}
    waiting = state.waiting_for_model
    if waiting is not None:
        answer["warning"] = waiting
        response.headers["Warning"] = warning_header(waiting)
    return answer


def _spooling(state: State, response: Response, away: StorageError) -> dict[str, Any]:
    """The answer of a process whose database is away: ready while its spool has room, else
    ``away`` raised (answered 503 ``database_unavailable``)."""
    spool = state.service.spool
    bound, held = spool.max_conversations, len(spool)
    if bound == 0 or held >= READY_SPOOL_FRACTION * bound:
        raise away
    warning = (
        f"the database is unavailable: conversations are spooled ({held} of at most {bound}) "
        "and written to the queue when it answers"
    )
    response.headers["Warning"] = warning_header(warning)
    return {
        "status": "ready",
        "database": "unavailable",
        "spooled": held,
        "spool_bound": bound,
        "warning": warning,
    }


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(state: State) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
