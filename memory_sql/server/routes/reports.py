"""``GET /v1/reports``: the tenant's reporting views (what ``memory-sql report`` shows)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ...ops.reports import build_report
from ..auth import Reader
from ..errors import error_responses
from ..state import State

router = APIRouter(prefix="/v1", tags=["reports"], responses=error_responses(400, 403))


@router.get("/reports", summary="Facts by category and confidence, activity, LLM usage")
def reports(
    caller: Reader,
    state: State,
    days: Annotated[int, Query(ge=1, le=366)] = 14,
    largest: Annotated[int, Query(ge=1, le=100)] = 10,
) -> Any:
    with caller.acting():
        return build_report(state.engine, tenant_id=caller.tenant_id, days=days, largest=largest)
