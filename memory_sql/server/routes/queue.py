"""The tenant's part of the update queue: its counts and rows, and requeueing failed ones."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ...errors import UpdateNotFoundError
from ...models import utcnow
from ...queue import manage
from ..auth import Admin, Reader
from ..errors import error_responses
from ..state import ServerState, State

router = APIRouter(
    prefix="/v1/queue", tags=["queue"], responses=error_responses(400, 403, 404, 415)
)


class Requeue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[str] | None = Field(
        None,
        description="Keys of rows as GET /v1/queue shows them; leave out for every failed row",
        max_length=1000,
    )


@router.get(
    "",
    summary="The tenant's queued updates (failed first) and their counts",
    description="Each row's last_error shows the memory LLM's endpoint and model to admin keys "
    "only.",
)
def queue_status(
    caller: Reader,
    state: State,
    failed_only: bool = False,
    user_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    with caller.acting():
        counts = manage.count_updates(state.engine, tenant_id=caller.tenant_id)
        rows = manage.list_updates(
            state.engine,
            failed_only=failed_only,
            tenant_id=caller.tenant_id,
            user_id=user_id,
            limit=limit,
        )
    updates = [row.to_dict() for row in rows]
    if not caller.key.allows("admin"):
        for update in updates:
            update["last_error"] = without_endpoint(update["last_error"], state)
    return {"counts": counts, "updates": updates}


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)


def without_endpoint(error: str | None, state: ServerState) -> str | None:
    """``error`` without the memory LLM's endpoint URL and model (any URL, and the configured
    model's name): an operator's details, shown to admin keys only."""
    if error is None:
        return None
    shown = _URL.sub("<LLM endpoint>", error)
    model = state.config.llm.model
    if model:
        shown = shown.replace(model, "<model>")
    return shown


@router.post(
    "/retry",
    summary="Run failed (or the named) updates again, now",
    description='No body (or `{}`): every failed update of the tenant; `{"keys": […]}`: '
    "the rows named.",
)
def requeue(caller: Admin, state: State, body: Requeue | None = None) -> Any:
    keys = None
    if body is not None and body.keys is not None:
        keys = [manage.UpdateKey.parse(text) for text in body.keys]
        for key in keys:
            if key.tenant_id != caller.tenant_id:  # as if it did not exist
                raise UpdateNotFoundError(str(key))
    with caller.acting():
        change = manage.retry_updates(state.engine, keys, tenant_id=caller.tenant_id)
    if change.changed:
        state.service.worker.notify(utcnow())
    return {"requeued": list(change.changed), "running": list(change.running)}
