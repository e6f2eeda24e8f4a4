"""``POST /v1/conversations``: queue a finished conversation for a debounced memory update."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ...errors import MemorySQLError
from ...intake.messages import normalize_messages
from ..auth import Writer
from ..errors import ApiError, error_responses
from ..state import ServerState, State

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
def queue_conversation(body: Conversation, caller: Writer, state: State) -> Any:
    limits = state.config
    if len(body.messages) > limits.server_max_messages:
        raise ApiError(
            413,
            "too_large",
            f"the conversation has {len(body.messages)} messages, over server_max_messages "
            f"({limits.server_max_messages})",
        )
    messages = normalize_messages(body.messages)
    for index, message in enumerate(messages):
        if len(message.text) > limits.server_max_message_chars:
            raise ApiError(
                413,
                "too_large",
                f"messages[{index}] has {len(message.text)} characters, over "
                f"server_max_message_chars ({limits.server_max_message_chars})",
            )
        if "\x00" in message.text:
            raise ApiError(400, "invalid_request", f"messages[{index}]: text contains a NUL byte")
    with caller.acting():
        queued = state.service.queue_conversation(
            messages,
            thread_id=body.thread_id,
            user_id=body.user_id,
            agent_name=body.agent_name,
            tenant_id=caller.tenant_id,
            immediate=body.immediate,
        )
    if not queued:
        reason = (
            "memory is off (enabled: false)"
            if not limits.enabled
            else "no user and assistant turn to learn from"
        )
        return JSONResponse({"queued": False, "reason": reason}, status_code=200)
    answer: dict[str, Any] = {
        "queued": True,
        "due": "now" if body.immediate else "after the debounce",
    }
    with caller.acting():
        over = _over_budget(state, caller.tenant_id)
    if over is not None:
        answer["due"] = "when the tenant's LLM budget allows"
        answer["budget"] = over
    return answer


def _over_budget(state: ServerState, tenant_id: str) -> str | None:
    """Why the tenant's updates wait (its daily LLM budget used up), or None."""
    try:
        return state.service.budget.over(tenant_id)
    except MemorySQLError:  # the database is away: the conversation is kept all the same
        return None
