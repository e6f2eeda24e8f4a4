"""``GET /v1/reports``: the tenant's reporting views (what ``memory-sql report`` shows)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ...ops.reports import build_report
from ..auth import Reader
from ..errors import error_responses
from ..state import State

router = APIRouter(prefix="/v1", tags=["reports"], responses=error_responses(400, 403))


@router.get(
    "/reports",
    summary="Facts by category and confidence, activity, LLM usage",
    description="With a daily LLM budget configured, llm_budget gives its limits and, once "
    "used up, why the tenant's updates wait.",
)
def reports(
    caller: Reader,
    state: State,
    days: Annotated[int, Query(ge=1, le=366)] = 14,
    largest: Annotated[int, Query(ge=1, le=100)] = 10,
) -> Any:
    with caller.acting():
        report = build_report(state.storage, tenant_id=caller.tenant_id, days=days, largest=largest)
        budget = state.service.budget
        if budget.limited:
            report["llm_budget"] = {
                "daily_calls": budget.daily_calls or None,
                "daily_tokens": budget.daily_tokens or None,
                "over": budget.over(caller.tenant_id),
            }
    return report
