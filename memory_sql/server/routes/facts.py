"""A user's facts: list and search, create, change, delete, and their history (the change log
of ``memory_fact_events``). Every write takes the memory's version in ``If-Match`` (412 when
it is stale) or, without one, is applied to the newest version."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ... import ops
from ...ops import history
from ...scope import Scope
from ...text_search import query_terms, search_text
from ..auth import Caller, Reader, Writer
from ..errors import ApiError, error_responses, not_found
from ..state import ServerState, State
from . import AgentQuery, AsOfQuery, IfMatch, as_utc, etag, precondition

router = APIRouter(
    prefix="/v1/users/{user_id}",
    tags=["facts"],
    responses=error_responses(400, 403, 404, 409, 412, 413),
)

MAX_PAGE = 500


class NewFact(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    category: str = "context"
    confidence: float = Field(0.9, ge=0, le=1)
    source_thread_id: str | None = None


class FactPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    category: str | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    source_error: str | None = None


@router.get("/facts", summary="The user's facts, highest confidence first; filtered and paged")
def list_facts(
    user_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    q: Annotated[str | None, Query(description="Text the fact contains (casefold)")] = None,
    category: str | None = None,
    min_confidence: Annotated[float | None, Query(ge=0, le=1)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    as_of: AsOfQuery = None,
    include_closed: Annotated[
        bool, Query(description="Also closed (superseded or removed) versions")
    ] = False,
) -> Any:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)
    if as_of is not None:
        records = _facts_as_of(state, caller, scope, as_utc(as_of), q, category, min_confidence)
    else:
        records = _search(
            state,
            caller,
            scope,
            agent_name,
            q,
            category,
            min_confidence,
            offset + limit + 1,
            include_closed,
        )
    page = records[offset : offset + limit]
    more = len(records) > offset + limit
    return {
        "facts": [record.to_dict() for record in page],
        "next_offset": offset + limit if more else None,
    }


def _facts_as_of(
    state: ServerState,
    caller: Caller,
    scope: Scope,
    as_of: datetime,
    q: str | None,
    category: str | None,
    min_confidence: float | None,
) -> list[ops.FactRecord]:
    """The facts believed at ``as_of``, highest confidence first, filtered as a search is
    (``q``: every term of it among the fact's)."""
    with caller.acting():
        doc = state.storage.load(**scope.arguments(), as_of=as_of)
    if doc.version == 0 and doc.last_updated is None:
        raise not_found(f"no memory of user {scope.user_id!r}")
    wanted = set(query_terms(q)) if q and q.strip() else set()
    facts = [
        fact
        for fact in doc.facts
        if (category is None or fact.category == category.strip().lower())
        and (min_confidence is None or fact.confidence >= min_confidence)
        and wanted <= set(search_text(fact.content).split())
    ]
    facts.sort(key=lambda fact: -fact.confidence)
    return [ops.FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, f) for f in facts]


def _search(
    state: ServerState,
    caller: Caller,
    scope: Scope,
    agent_name: str | None,
    q: str | None,
    category: str | None,
    min_confidence: float | None,
    limit: int,
    include_closed: bool,
) -> list[ops.FactRecord]:
    with caller.acting():
        records = ops.search_facts(
            state.engine,
            q,
            category=category,
            min_confidence=min_confidence,
            tenant_id=scope.tenant_id,
            user_id=scope.user_id,
            agent_name=None if agent_name is None else scope.agent_key,
            limit=limit,
            include_closed=include_closed,
        )
        exists = records or ops.memory_exists(
            state.engine, scope.user_id, agent_name=agent_name, tenant_id=scope.tenant_id
        )
        if not exists:
            raise not_found(f"no memory of user {scope.user_id!r}")
    return records


@router.post("/facts", status_code=201, summary="Add a fact (409 if its text is stored)")
def create_fact(
    user_id: str,
    body: NewFact,
    caller: Writer,
    state: State,
    agent_name: AgentQuery = None,
    if_match: IfMatch = None,
) -> Any:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)
    with precondition(if_match, state, caller, scope) as version:
        change = ops.add_fact(
            state.storage,
            body.content,
            category=body.category,
            confidence=body.confidence,
            source_thread_id=body.source_thread_id,
            **scope.arguments(),
            expected_version=version,
        )
    return _answer(change, scope, status=201)


@router.patch("/facts/{fact_id}", summary="Change a fact's content, category or confidence")
def patch_fact(
    user_id: str,
    fact_id: str,
    body: FactPatch,
    caller: Writer,
    state: State,
    agent_name: AgentQuery = None,
    if_match: IfMatch = None,
) -> Any:
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise ApiError(400, "invalid_request", "nothing to change: give content, category, …")
    if any(value is None for key, value in changes.items() if key != "source_error"):
        raise ApiError(400, "invalid_request", "content, category and confidence cannot be null")
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)
    with precondition(if_match, state, caller, scope) as version:
        change = ops.update_fact(
            state.storage,
            fact_id,
            **scope.arguments(),
            expected_version=version,
            **changes,
        )
    return _answer(change, scope)


@router.delete("/facts/{fact_id}", summary="Delete a fact")
def delete_fact(
    user_id: str,
    fact_id: str,
    caller: Writer,
    state: State,
    agent_name: AgentQuery = None,
    if_match: IfMatch = None,
) -> Any:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)
    with precondition(if_match, state, caller, scope) as version:
        change = ops.remove_fact(
            state.storage,
            fact_id,
            **scope.arguments(),
            expected_version=version,
        )
    return _answer(change, scope)


@router.get("/facts/{fact_id}/history", summary="A fact's changes, newest first")
def fact_history(
    user_id: str,
    fact_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> Any:
    return _changes(state, caller, user_id, agent_name, fact_id, after, limit)


@router.get("/changes", summary="The change log of a memory's facts, newest first")
def changes(
    user_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> Any:
    return _changes(state, caller, user_id, agent_name, None, after, limit)


def _changes(
    state: ServerState,
    caller: Caller,
    user_id: str,
    agent_name: str | None,
    fact_id: str | None,
    after: str | None,
    limit: int,
) -> dict[str, Any]:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)
    with caller.acting():
        events, cursor = history.change_log(
            state.engine, scope, fact_id=fact_id, after=after, limit=limit
        )
        if not events and after is None:
            what = f"fact {fact_id!r}" if fact_id else f"memory of user {user_id!r}"
            raise not_found(f"no history of {what}")
    return {"events": events, "next": cursor}


def _answer(change: ops.FactChange, scope: Scope, status: int = 200) -> JSONResponse:
    record = ops.FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, change.fact)
    return JSONResponse(
        {"fact": record.to_dict(), "version": change.version},
        status_code=status,
        headers=etag(change.version),
    )
