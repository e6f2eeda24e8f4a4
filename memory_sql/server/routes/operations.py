"""``/healthz`` (the process answers), ``/readyz`` (the database answers and is at the schema
head) and ``/metrics`` (Prometheus). None needs a key; none shows a tenant's data."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ... import migrations
from ..errors import ApiError, warning_header
from ..metrics import CONTENT_TYPE
from ..state import State

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The database answers and its schema is at the head",
    description="200 when ready. With no memory LLM model configured the service is ready "
    "all the same (conversations are kept), and the answer's `warning` (also a `Warning` "
    "header) says that updates wait until one is.",
)
def readyz(state: State, response: Response) -> dict[str, str]:
    head = state.head_revision
    current = migrations.current_revision(state.engine)  # a StorageError answers 503
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


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(state: State) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
