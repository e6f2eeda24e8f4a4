"""``POST /v1/conversations``: queue a finished conversation for a debounced memory update."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ...config import ServerSettings
from ...errors import MemorySQLError
from ...intake.messages import Message, normalize_messages
from ...service import MemoryService
from ..auth import Writer
from ..errors import ApiError, error_responses, warning_header
from ..state import State

router = APIRouter(
    prefix="/v1", tags=["conversations"], responses=error_responses(400, 403, 413, 415)
)


class Conversation(BaseModel):
    """A finished conversation of one user with one agent, in OpenAI or LangChain shape."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    agent_name: str | None = None
    thread_id: str
    messages: list[dict[str, Any]] = Field(
        description='OpenAI ({"role", "content"}) or LangChain ({"type", "content"}) messages'
    )
    immediate: bool = Field(
        False,
        description="Due now, not debounced: messages that summarization is about to drop",
    )


@router.post(
    "/conversations",
    status_code=202,
    summary="Queue a finished conversation for the memory update",
    responses={200: {"description": "Nothing to learn from (no user and assistant turn)"}},
)
def queue_conversation(body: Conversation, caller: Writer, state: State, response: Response) -> Any:
    messages = checked_messages(body.messages, state.config.server)
    with caller.acting():
        answer = queue_checked(
            state.service,
            messages,
            thread_id=body.thread_id,
            user_id=body.user_id,
            agent_name=body.agent_name,
            tenant_id=caller.tenant_id,
            immediate=body.immediate,
        )
    if not answer["queued"]:
        return JSONResponse(answer, status_code=200)
    waiting = state.waiting_for_model
    if waiting is not None:  # issue 34: kept, but nothing learns from it until a model is set
        answer["due"] = "when a memory LLM model is configured"
        answer["warning"] = waiting
        response.headers["Warning"] = warning_header(waiting)
    return answer


def queue_checked(
    service: MemoryService,
    messages: list[Message],
    *,
    thread_id: str,
    user_id: str,
    agent_name: str | None,
    tenant_id: str,
    immediate: bool,
) -> dict[str, Any]:
    """Queue checked messages (:func:`checked_messages`); the answer says whether they were
    queued (else ``reason``), when they are ``due``, and the tenant's LLM ``budget`` when it
    holds them back. Raises what :meth:`MemoryService.queue_conversation` raises."""
    queued = service.queue_conversation(
        messages,
        thread_id=thread_id,
        user_id=user_id,
        agent_name=agent_name,
        tenant_id=tenant_id,
        immediate=immediate,
    )
    if not queued:
        reason = (
            "memory is off (enabled: false)"
            if not service.config.enabled
            else "no user and assistant turn to learn from"
        )
        return {"queued": False, "reason": reason}
    answer: dict[str, Any] = {"queued": True, "due": "now" if immediate else "after the debounce"}
    over = _over_budget(service, tenant_id)
    if over is not None:
        answer["due"] = "when the tenant's LLM budget allows"
        answer["budget"] = over
    return answer


def checked_messages(raw: list[dict[str, Any]], limits: ServerSettings) -> list[Message]:
    """``raw`` messages normalised, within the service's limits (``server_max_messages``,
    ``server_max_message_chars``: else 413 naming the limit) and without NUL bytes (400)."""
    if len(raw) > limits.max_messages:
        raise ApiError(
            413,
            "too_large",
            f"the conversation has {len(raw)} messages, over server_max_messages "
            f"({limits.max_messages})",
        )
    messages = normalize_messages(raw)
    for index, message in enumerate(messages):
        if len(message.text) > limits.max_message_chars:
            raise ApiError(
                413,
                "too_large",
                f"messages[{index}] has {len(message.text)} characters, over "
                f"server_max_message_chars ({limits.max_message_chars})",
            )
        if "\x00" in message.text:
            raise ApiError(400, "invalid_request", f"messages[{index}]: text contains a NUL byte")
    return messages


def _over_budget(service: MemoryService, tenant_id: str) -> str | None:
    """Why the tenant's updates wait (its daily LLM budget used up), or None."""
    try:
        return service.budget.over(tenant_id)
    except MemorySQLError:  # the database is away: the conversation is kept all the same
        return None
