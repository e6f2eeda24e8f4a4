"""One user's memory: the context block for the prompt, the document (DeerFlow's memory.json,
read and replaced), the tenant's memories as JSON Lines (export and import), and forgetting a
user."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ... import ops
from ...errors import ImportFileError
from ...intake.guard import redacted_document
from ...intake.messages import Message, normalize_messages
from ...models import MemoryDocument
from ...scope import Scope
from ...tenancy import acting_for
from ..auth import Admin, Caller, Reader, Writer
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
    prefix="/v1", tags=["memory"], responses=error_responses(400, 403, 404, 409, 412, 413, 415, 422)
)


def _load(
    state: ServerState,
    caller: Caller,
    user_id: str,
    agent_name: str | None,
    as_of: datetime | None = None,
    held: int | None = None,
) -> MemoryDocument:
    """The memory of (user, agent) in the caller's tenant (``as_of``: as it was then, see
    :meth:`~memory_sql.storage.MemoryStorage.load`); 404 when there is none. Read from the
    replica when it may serve it (``held``: the version the reader holds)."""

    def read(target: ReadTarget) -> MemoryDocument:
        with caller.acting():
            doc = target.storage.load(
                user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id, as_of=as_of
            )
        if doc.version == 0 and (as_of is None or doc.last_updated is None):
            agent = f", agent {agent_name!r}" if agent_name else ""
            raise not_found(f"no memory of user {user_id!r}{agent}")
        return doc

    doc = replica_read(state, read, held=held, version_of=lambda found: found.version)
    return redacted_document(doc)


@router.get(
    "/users/{user_id}/context",
    summary="The memory block for the system prompt ('' when there is nothing to show)",
)
def context(
    user_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    q: Annotated[
        str | None,
        Query(
            max_length=10_000,
            description="the turn about to be answered: the facts most relevant to it come first",
        ),
    ] = None,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> Any:
    held = min_version(min_version_header, min_version_query)
    return _context(state, caller, user_id, agent_name, q, held)


class ContextQuery(BaseModel):
    """What the next turn is about: a text, or the conversation so far (its last user turns)."""

    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(None, max_length=10_000)
    messages: list[dict[str, Any]] | None = Field(
        None, description="OpenAI or LangChain messages; the last user turns make the query"
    )


@router.post(
    "/users/{user_id}/context",
    summary="The memory block chosen for a turn or a conversation (ranked by relevance)",
)
def ranked_context(
    user_id: str,
    body: ContextQuery,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> Any:
    if body.query is not None and body.messages is not None:
        raise ApiError(400, "invalid_request", "give query or messages, not both")
    query = body.query if body.messages is None else normalize_messages(body.messages)
    held = min_version(min_version_header, min_version_query)
    return _context(state, caller, user_id, agent_name, query, held)


def _context(
    state: ServerState,
    caller: Caller,
    user_id: str,
    agent_name: str | None,
    query: str | list[Message] | None,
    held: int | None = None,
) -> Any:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)

    def read(target: ReadTarget) -> tuple[MemoryDocument, str]:
        with caller.acting():
            doc = target.storage.load(**scope.arguments())
            return doc, state.service.render_context(
                doc, scope=scope, query=query, recall=target.recall
            )

    doc, block = replica_read(state, read, held=held, version_of=lambda found: found[0].version)
    return JSONResponse({"context": block, "version": doc.version}, headers=etag(doc.version))


@router.get("/users/{user_id}/memory", summary="The memory document (DeerFlow's memory.json)")
def get_memory(
    user_id: str,
    caller: Reader,
    state: State,
    agent_name: AgentQuery = None,
    as_of: AsOfQuery = None,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> Any:
    held = min_version(min_version_header, min_version_query)
    if as_of is not None:  # a past view: its facts as they were, no version to write against
        return _load(state, caller, user_id, agent_name, as_utc(as_of), held).to_deerflow()
    doc = _load(state, caller, user_id, agent_name, held=held)
    return JSONResponse(doc.to_deerflow(), headers=etag(doc.version))


@router.put(
    "/users/{user_id}/memory",
    summary="Make the memory hold a memory.json's sections and facts (idempotent)",
)
def put_memory(
    user_id: str,
    memory: Annotated[dict[str, Any], Body(description="DeerFlow's memory.json")],
    caller: Writer,
    state: State,
    agent_name: AgentQuery = None,
    if_match: IfMatch = None,
) -> Any:
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=caller.tenant_id)
    with precondition(if_match, state, caller, scope) as version:
        before, after = ops.import_memory(
            state.storage,
            memory,
            **scope.arguments(),
            source="request body",
            expected_version=version,
        )
    return JSONResponse(
        {"version_before": before, "version": after, "changed": before != after},
        headers=etag(after),
    )


@router.get(
    "/export",
    summary="Every memory of the tenant as JSON Lines, streamed",
    response_class=StreamingResponse,
)
def export(
    caller: Reader,
    state: State,
    min_version_header: MinVersionHeader = None,
    min_version_query: MinVersionQuery = None,
) -> StreamingResponse:
    held = min_version(min_version_header, min_version_query)

    # The first line is read before the status is sent, so that a database that fails answers
    # 503 rather than a 200 with an empty (or cut) body. A reader holding a version reads the
    # primary (the export spans every memory: no one version to check on the replica).
    def start(target: ReadTarget) -> tuple[Iterator[str], str | None]:
        lines = ops.iter_jsonl(target.storage, tenant_id=caller.tenant_id)
        with caller.acting():
            return lines, next(lines, None)

    lines, first = replica_read(state, start, held=held)
    head = [] if first is None else [(first + "\n").encode("utf-8")]
    return StreamingResponse(
        itertools.chain(head, _acting_while(caller.tenant_id, lines)),
        media_type="application/x-ndjson",
    )


@router.post(
    "/import",
    summary="Import JSON Lines of memories into the tenant (idempotent)",
    openapi_extra={
        "requestBody": {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}}
    },
)
async def import_jsonl(request: Request, caller: Writer, state: State) -> Any:
    body = await request.body()
    return await run_in_threadpool(_import, body, caller, state)


def _import(body: bytes, caller: Caller, state: ServerState) -> dict[str, int]:
    memories = ops.read_jsonl(body, source="request body", tenant_id=caller.tenant_id)
    for item in memories:
        if item.scope.tenant_id != caller.tenant_id:
            raise ImportFileError(
                "request body", item.line, "tenant_id must be the key's tenant, or left out"
            )
    with caller.acting():
        result = ops.import_scoped(state.storage, memories)
    return {"memories": result.memories, "changed": result.changed}


@router.delete(
    "/users/{user_id}",
    summary="Forget a user: every memory, fact, event and queued update of theirs",
)
def forget(user_id: str, caller: Admin, state: State) -> Any:
    with caller.acting():
        deleted = ops.forget_user(state.storage, user_id, tenant_id=caller.tenant_id)
    if not any(deleted.values()):
        raise not_found(f"nothing is stored of user {user_id!r}")
    return {"deleted": deleted}


def _acting_while(tenant_id: str, lines: Iterator[str]) -> Iterator[bytes]:
    """``lines`` encoded, each produced while acting for ``tenant_id``: the response streams
    them from threads of its own, where the request's acting does not reach."""
    while True:
        with acting_for(tenant_id):
            line = next(lines, None)
        if line is None:
            return
        yield (line + "\n").encode("utf-8")
