"""The MCP server of memory_sql: its tools and resources, on the official ``mcp`` SDK.

:func:`build_server` makes an ``MCPServer`` whose tools reach memory through the
:class:`Access` that ``resolve`` gives for each request: the HTTP mount resolves the caller's
API key (:mod:`.http`), ``memory-sql mcp`` over stdio a fixed one (:mod:`.stdio`).

Every tool answers a typed result (structured content, with its JSON as text), or an
``isError`` result whose text starts with a stable code and names the problem
(``version_conflict: the memory is no longer at version 3 (it is now 4): …``); never a
traceback, and never the database's own message (that goes to the log).

A tool names the memory with ``user_id`` and ``agent_name``. A server with a fixed user
(``memory-sql mcp --user``, or an ``X-Memory-User`` header on the HTTP mount) takes its user
when ``user_id`` is left out, and refuses any other; without one, ``user_id`` is required.
``agent_name`` left out is the server's agent (``--agent``), else the unnamed agents' memory.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..client.errors import ServiceError
from ..client.results import Context as ContextBlock
from ..client.results import EventPage, FactChange, FactPage, Queued
from ..errors import (
    DuplicateFactError,
    FactNotFoundError,
    MemorySQLError,
    SchemaOutOfDateError,
    SpoolFullError,
    StorageError,
    VersionConflictError,
)
from ..models import MemoryDocument
from ..ops import describe_validation_error
from ..server.errors import ApiError
from .backends import Memory

logger = logging.getLogger("memory_sql.mcp")

T = TypeVar("T")

ROLES = ("read", "write", "admin")

INSTRUCTIONS = (
    "Long-term memory of the user. Before answering, call get_context with the user's message "
    "as query: it gives the memory block to follow. When the user states a durable fact, "
    "preference or correction, add_fact (or update_fact / delete_fact a wrong one, passing "
    "the version from get_context or get_memory). After a conversation, "
    "remember_conversation lets the memory learn from it in the background."
)


@dataclass(frozen=True)
class Access:
    """What one request may reach: ``memory`` (one tenant's), the ``user_id`` it is fixed to
    (None: any the tool names), the default ``agent_name``, and the ``role`` its key has
    (``read``, ``write`` or ``admin``)."""

    memory: Memory
    user_id: str | None = None
    agent_name: str | None = None
    role: str = "admin"

    def allows(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


Resolver = Callable[[Context | None], Access]
"""Gives the :class:`Access` of a request (raises :class:`PermissionError` when none); the
context is None for a static resource (of a server whose access is fixed)."""


class ChatMessage(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(max_length=100_000)


UserId = Annotated[
    str | None,
    Field(
        max_length=128,
        description="The user whose memory it is; leave out on a server with a fixed user.",
    ),
]
AgentName = Annotated[
    str | None,
    Field(
        max_length=64,
        description="The agent whose memory it is (letters, digits, -); leave out for the "
        "server's agent, or the memory shared by unnamed agents.",
    ),
]
Version = Annotated[
    int | None,
    Field(
        ge=0,
        le=2**31 - 1,
        description="The memory version this change is based on (from get_context, get_memory "
        "or the last change's answer): refused with version_conflict if the memory has changed "
        "since. Leave out to change the newest version.",
    ),
]
FactId = Annotated[str, Field(min_length=1, max_length=64, description="The fact's id.")]
Confidence = Annotated[float, Field(ge=0, le=1, description="How sure, from 0 to 1.")]
Category = Annotated[
    str,
    Field(
        min_length=1,
        max_length=32,
        description="preference, knowledge, context, behavior, goal or correction.",
    ),
]

_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def build_server(resolve: Resolver, *, fixed_user: str | None = None) -> MCPServer:
    """The MCP server whose tools act through ``resolve``. ``fixed_user``, when the server
    serves one user only and knows it now (stdio), also lists that user's memory as a
    resource (``memory://<user>``)."""
    server: MCPServer = _MemoryServer(
        "memory-sql",
        title="memory_sql",
        description="Long-term memory of users, stored in SQL.",
        instructions=INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",
    )

    def run(
        ctx: Context | None,
        role: str,
        user_id: str | None,
        agent_name: str | None,
        work: Callable[[Memory, str, str | None], T],
    ) -> T:
        """``work(memory, user, agent)`` for the request's access, its failures as tool
        errors naming the problem."""
        try:
            access = _access(resolve, ctx, role)
            user, agent = _memory_of(access, user_id, agent_name)
            return work(access.memory, user, agent)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(describe(exc)) from None

    @server.tool(annotations=_READ)
    def get_context(
        ctx: Context,
        query: Annotated[
            str | None,
            Field(
                max_length=10_000,
                description="The turn about to be answered: the facts most relevant to it "
                "come first. Leave out for the facts by category and confidence.",
            ),
        ] = None,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> ContextBlock:
        """The user's memory as a block for the system prompt ('' when there is nothing yet),
        chosen for the query within the token budget, and the memory's version."""
        return run(ctx, "read", user_id, agent_name, lambda m, u, a: m.context(u, a, query))

    @server.tool(annotations=_READ)
    def search_facts(
        ctx: Context,
        query: Annotated[
            str | None,
            Field(
                max_length=1_000,
                description="Words the facts hold (each also as a word's start, any case); "
                "leave out for all, highest confidence first.",
            ),
        ] = None,
        category: Annotated[str | None, Field(max_length=32)] = None,
        min_confidence: Annotated[float | None, Field(ge=0, le=1)] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> FactPage:
        """The user's facts matching the query, most relevant first (all agents' memories of
        the user unless agent_name is given)."""
        return run(
            ctx,
            "read",
            user_id,
            agent_name,
            lambda m, u, a: m.search(
                u, a if agent_name is not None else None, query, category, min_confidence, limit
            ),
        )

    @server.tool(annotations=_WRITE)
    def add_fact(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, max_length=10_000)],
        category: Category = "context",
        confidence: Confidence = 0.9,
        version: Version = None,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> FactChange:
        """Add a durable fact about the user (refused with duplicate_fact when the memory
        already holds the same text, in any case). Answers the fact and the new version."""
        return run(
            ctx,
            "write",
            user_id,
            agent_name,
            lambda m, u, a: m.add_fact(u, a, content, category, confidence, version),
        )

    @server.tool(annotations=_WRITE)
    def update_fact(
        ctx: Context,
        fact_id: FactId,
        content: Annotated[str | None, Field(min_length=1, max_length=10_000)] = None,
        category: Annotated[str | None, Field(min_length=1, max_length=32)] = None,
        confidence: Annotated[float | None, Field(ge=0, le=1)] = None,
        version: Version = None,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> FactChange:
        """Change a fact's content, category or confidence, based on the memory's version.
        Answers the fact as changed and the new version."""
        changes = {
            name: value
            for name, value in (
                ("content", content),
                ("category", category),
                ("confidence", confidence),
            )
            if value is not None
        }
        if not changes:
            raise ToolError(
                "invalid_request: nothing to change: give content, category or confidence"
            )
        return run(
            ctx,
            "write",
            user_id,
            agent_name,
            lambda m, u, a: m.update_fact(u, a, fact_id, version, changes),
        )

    @server.tool(annotations=_DESTRUCTIVE)
    def delete_fact(
        ctx: Context,
        fact_id: FactId,
        version: Version = None,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> FactChange:
        """Delete a fact, based on the memory's version. Answers the fact as it was and the
        new version."""
        return run(
            ctx,
            "write",
            user_id,
            agent_name,
            lambda m, u, a: m.delete_fact(u, a, fact_id, version),
        )

    @server.tool(annotations=_WRITE)
    def remember_conversation(
        ctx: Context,
        messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=1_000)],
        thread_id: Annotated[
            str | None,
            Field(
                max_length=256,
                description="The conversation's id: a later call with the same id replaces "
                "the one still waiting. Leave out for a new one.",
            ),
        ] = None,
        immediate: Annotated[
            bool, Field(description="Due now instead of after the debounce.")
        ] = False,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> Queued:
        """Queue a finished conversation: the memory learns from it in the background
        (debounced). Answers whether it was queued, and when it is due."""
        thread = thread_id if thread_id is not None else f"mcp-{uuid.uuid4().hex[:16]}"
        raw = [message.model_dump() for message in messages]
        return run(
            ctx,
            "write",
            user_id,
            agent_name,
            lambda m, u, a: m.remember(u, a, thread, raw, immediate),
        )

    @server.tool(annotations=_READ)
    def get_memory(
        ctx: Context, user_id: UserId = None, agent_name: AgentName = None
    ) -> MemoryDocument:
        """The whole memory: the user's context and history sections, every fact, and the
        version (0: nothing stored yet)."""
        return run(ctx, "read", user_id, agent_name, lambda m, u, a: m.memory(u, a))

    @server.tool(annotations=_READ)
    def fact_history(
        ctx: Context,
        fact_id: FactId,
        after: Annotated[
            str | None, Field(max_length=100, description="The next page's cursor.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
        user_id: UserId = None,
        agent_name: AgentName = None,
    ) -> EventPage:
        """A fact's changes (added, updated, removed), oldest first."""
        return run(
            ctx,
            "read",
            user_id,
            agent_name,
            lambda m, u, a: m.history(u, a, fact_id, after, limit),
        )

    def document(ctx: Context | None, user_id: str | None, agent_name: str | None) -> str:
        try:
            doc = run(ctx, "read", user_id, agent_name, lambda m, u, a: m.memory(u, a))
        except ToolError as exc:
            raise ResourceError(str(exc)) from None
        return json.dumps({**doc.to_deerflow(), "revision": doc.version}, ensure_ascii=False)

    @server.resource(
        "memory://{user_id}",
        name="memory",
        description="A user's memory document (DeerFlow's memory.json), for the unnamed agents.",
        mime_type="application/json",
    )
    def user_memory(user_id: str, ctx: Context) -> str:
        return document(ctx, user_id, None)

    @server.resource(
        "memory://{user_id}/{agent_name}",
        name="agent-memory",
        description="A user's memory document (DeerFlow's memory.json) for one agent.",
        mime_type="application/json",
    )
    def agent_memory(user_id: str, agent_name: str, ctx: Context) -> str:
        return document(ctx, user_id, agent_name)

    if fixed_user is not None:

        @server.resource(
            f"memory://{fixed_user}",
            name="my-memory",
            description="This server's user's memory document (DeerFlow's memory.json).",
            mime_type="application/json",
        )
        def my_memory() -> str:
            return document(None, fixed_user, None)  # a static resource has no context

    return server


class _MemoryServer(MCPServer):
    """The SDK's server, with arguments that fail validation named on one line
    (``invalid_request: content: Input should be a valid string``)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                problem = describe_validation_error(exc.__cause__)
                raise ToolError(f"invalid_request: {problem}") from exc.__cause__
            raise


def _access(resolve: Resolver, ctx: Context | None, role: str) -> Access:
    access = resolve(ctx)
    if not access.allows(role):
        raise PermissionError(f"this key's role ({access.role}) cannot {role}")
    return access


def _memory_of(
    access: Access, user_id: str | None, agent_name: str | None
) -> tuple[str, str | None]:
    if access.user_id is not None:
        if user_id is not None and user_id != access.user_id:
            raise PermissionError(
                f"this MCP server serves user {access.user_id!r} only: leave user_id out"
            )
        user = access.user_id
    elif user_id is None:
        raise ValueError("user_id is required (this MCP server has no fixed user)")
    else:
        user = user_id
    return user, agent_name if agent_name is not None else access.agent_name


def describe(exc: BaseException) -> str:
    """A tool's error text for ``exc``: ``<code>: <what is wrong>``, never the database's own
    message (logged instead)."""
    message = " ".join(str(exc).split())
    if isinstance(exc, VersionConflictError):  # a 412 of the service too: the same advice
        return (
            f"version_conflict: {message}; read the memory again (get_memory) and retry with "
            "its version"
        )
    if isinstance(exc, ServiceError):
        return f"{exc.code}: {exc.message}"
    if isinstance(exc, ApiError):
        return f"{exc.code}: {exc.message}"
    if isinstance(exc, DuplicateFactError):
        return f"duplicate_fact: {message}"
    if isinstance(exc, FactNotFoundError):
        return f"not_found: {message}"
    if isinstance(exc, SpoolFullError):
        return f"not_kept: {message} (send it again in {max(1, round(exc.retry_after))} s)"
    if isinstance(exc, (StorageError, SchemaOutOfDateError)):
        logger.warning("MCP tool: the database failed: %s", message)
        return "unavailable: the memory database is unavailable; try again later"
    if isinstance(exc, PermissionError):
        return f"forbidden: {message}"
    if isinstance(exc, (ValueError, LookupError, MemorySQLError)):
        return f"invalid_request: {message}"
    logger.error("MCP tool failed", exc_info=exc)
    return "internal: the tool failed unexpectedly (the server's log has the details)"


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("memory-sql")
    except metadata.PackageNotFoundError:
        return "0"


__all__ = ["Access", "Resolver", "build_server", "describe"]
