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
from ...intake.guard import redacted_document
from ...ops import history
from ...scope import Scope
from ...text_search import query_terms, search_text
from ..auth import Caller, Reader, Writer
from ..errors import ApiError, error_responses, not_found
from ..reads import ReadTarget
from ..state import ServerState, State
from . import (
    AgentQuery,
    AsOfQuery,
    IfMatch,
    MinVersionHeader,
    MinVersionQuery,
    as_utc,
    etag,
    min_version,
    precondition,
    replica_read,
)

router = APIRouter(
    prefix="/v1/users/{user_id}",
    tags=["facts"],
    responses=error_responses(400, 403, 404, 409, 412, 413, 415),
)

MAX_PAGE = 500


API_SOURCE = "api"
"""The source of a fact made through the API without a ``source_thread_id`` (as DeerFlow
names the source of a fact made by hand ``manual``)."""


class NewFact(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    category: str = "context"
    confidence: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Stored as given: min_confidence filters the facts the memory LLM "
        "proposes, not those written on purpose, and such a fact is injected like any other.",
    )
    source_thread_id: str | None = Field(
        None, description=f"The thread it was learned from; left out: `{API_SOURCE}`"
    )


class FactPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    category: str | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    source_error: str | None = None


EVERY_AGENT = "*"

ListAgentQuery = Annotated[
    str | None,
    Query(
        description="The agent whose memory's facts to list; leave out for the unnamed agents' "
        "memory, `*` for every agent's memory of the user."
    ),
]


@router.get(
    "/facts",
    summary="The user's facts, highest confidence first; filtered and paged",
    description="Each fact carries `version`, the version of its memory when it was read, "
    "for the `If-Match` of a change; with one memory listed the answer's `ETag` (and "
    "`version`) is that version too. Versions are read before the facts, so a change in "
    "between answers 412 to a write based on them, never a lost update. With `as_of`, the "
    "facts believed then, each with the memory's version then, and no `ETag` (a past read is "
    "no base for a write); `include_closed` adds superseded and removed versions.",
)
def list_facts(
    user_id: str,
    caller: Reader,
    state: State,
    agent_name: ListAgentQuery = None,
    q: Annotated[
        str | None,
        Query(description="Words the fact holds, each also as a prefix, case and accents folded"),
    ] = None,
    category: str | None = None,
    min_confidence: Annotated[float | None, Query(ge=0, le=1)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    as_of: AsOfQuery = None,
    include_closed: Annotated[
        bool, Query(description="Also closed (superseded or removed) versions")
    ] = False,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> Any:
    held = min_version(min_version_header, min_version_query)
    every_agent = agent_name == EVERY_AGENT
    scope = Scope.of(
        user_id=user_id, agent_name=None if every_agent else agent_name, tenant_id=caller.tenant_id
    )
    if as_of is not None and every_agent:
        raise ApiError(400, "invalid_request", "as_of reads one memory: name its agent_name, not *")

    def read(target: ReadTarget) -> tuple[dict[str | None, int], list[ops.FactRecord]]:
        if as_of is not None:
            version, found = _facts_as_of(
                target, caller, scope, as_utc(as_of), q, category, min_confidence
            )
            return {scope.agent_name: version}, found
        with caller.acting():
            versions = ops.memory_versions(target.storage, scope.user_id, tenant_id=scope.tenant_id)
            if not (versions if every_agent else scope.agent_name in versions):
                raise not_found(f"no memory of user {user_id!r}")
            return versions, ops.search_facts(
                target.storage,
                q,
                category=category,
                min_confidence=min_confidence,
                tenant_id=scope.tenant_id,
                user_id=scope.user_id,
                agent_name=None if every_agent else scope.agent_key,
                limit=offset + limit + 1,
                include_closed=include_closed,
                recall=target.recall,
            )

    def held_version(found: tuple[dict[str | None, int], list[ops.FactRecord]]) -> int | None:
        # With every agent's memories, the newest of them stands for the user's.
        return (
            max(found[0].values(), default=None) if every_agent else found[0].get(scope.agent_name)
        )

    versions, records = replica_read(state, read, held=held, version_of=held_version)
    page = records[offset : offset + limit]
    more = len(records) > offset + limit
    facts = []
    for record in page:
        fact = record.to_dict()
        fact["version"] = versions.get(record.agent_name, 0)
        facts.append(fact)
    answer: dict[str, Any] = {"facts": facts, "next_offset": offset + limit if more else None}
    if every_agent or as_of is not None:
        return answer
    version = versions[scope.agent_name]
    return JSONResponse({**answer, "version": version}, headers=etag(version))


def _facts_as_of(
    target: ReadTarget,
    caller: Caller,
    scope: Scope,
    as_of: datetime,
    q: str | None,
    category: str | None,
    min_confidence: float | None,
) -> tuple[int, list[ops.FactRecord]]:
    """The version of the memory at ``as_of`` and the facts believed then, highest confidence
    first, filtered as a search is (``q``: every term of it among the fact's)."""
    with caller.acting():
        doc = redacted_document(target.storage.load(**scope.arguments(), as_of=as_of))
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
    records = [ops.FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, f) for f in facts]
    return doc.version, records


@router.post(
    "/facts",
    status_code=201,
    summary="Add a fact (409 if its text is stored)",
    description="The fact is stored at the confidence given, below `min_confidence` too (that "
    "threshold filters what the memory LLM proposes, not what a caller writes on purpose); its "
    f"source is `source_thread_id`, or `{API_SOURCE}`.",
)
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
            source_thread_id=body.source_thread_id or API_SOURCE,
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


_HISTORY = (
    "Oldest first; a page holds at most `limit` events, and `next` is the cursor to pass as "
    "`after` for the next page (null: no more for now). Each event carries its own `cursor`: "
    "keep the last one to read, later, only what happened since."
)


@router.get(
    "/facts/{fact_id}/history", summary="A fact's changes, oldest first", description=_HISTORY
)
def fact_history(
    user_id: str,
    fact_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> Any:
    held = min_version(min_version_header, min_version_query)
    return _changes(state, caller, user_id, agent_name, fact_id, after, limit, held)


@router.get(
    "/changes", summary="The change log of a memory's facts, oldest first", description=_HISTORY
)
def changes(
    user_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> Any:
    held = min_version(min_version_header, min_version_query)
    return _changes(state, caller, user_id, agent_name, None, after, limit, held)


def _changes(
    state: ServerState,
    caller: Caller,
    user_id: str,
    agent_name: str | None,
    fact_id: str | None,
    after: str | None,
    limit: int,
    held: int | None = None,
) -> dict[str, Any]:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)

    def read(target: ReadTarget) -> tuple[list[dict[str, Any]], str | None]:
        with caller.acting():
            found, next_cursor = history.change_log(
                target.storage, scope, fact_id=fact_id, after=after, limit=limit
            )
        if not found and after is None:
            what = f"fact {fact_id!r}" if fact_id else f"memory of user {user_id!r}"
            raise not_found(f"no history of {what}")
        return found, next_cursor

    # A reader holding a version reads the primary: a page of history has no version of its own.
    events, cursor = replica_read(state, read, held=held)
    for event in events:
        event["cursor"] = history.cursor_of(event["version"], event["fact_id"])
    return {"events": events, "next": cursor}


def _answer(change: ops.FactChange, scope: Scope, status: int = 200) -> JSONResponse:
    record = ops.FactRecord(scope.tenant_id, scope.user_id, scope.agent_name, change.fact)
    return JSONResponse(
        {"fact": record.to_dict(), "version": change.version},
        status_code=status,
        headers=etag(change.version),
    )
