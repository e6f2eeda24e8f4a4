"""Stand-in for DeerFlow's memory HTTP router (``/api/memory…``): its response models and how
it maps a backend's exceptions to HTTP statuses, written from the contract reference.

``MemoryResponse`` casts the dict a backend returns the way the router does (unknown keys
dropped), with the checks DeerFlow's frontend needs on top: ``lastUpdated`` a parseable,
non-empty timestamp, and every fact's ``createdAt`` too. :func:`call` runs one backend method
as the router does (with ``user_id`` only) and answers ``(status, body)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from deerflow.agents.memory.manager import MemoryConflictError, MemoryCorruptionError
from pydantic import BaseModel, Field, ValidationError, field_validator


def _timestamp(value: str) -> str:
    if not value:
        raise ValueError("an empty timestamp (the frontend's date formatter fails on it)")
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


class Section(BaseModel):
    summary: str = ""
    updatedAt: str = ""

    @field_validator("updatedAt")
    @classmethod
    def _updated(cls, value: str) -> str:
        return _timestamp(value) if value else value


class UserContext(BaseModel):
    workContext: Section = Field(default_factory=Section)
    personalContext: Section = Field(default_factory=Section)
    topOfMind: Section = Field(default_factory=Section)


class HistoryContext(BaseModel):
    recentMonths: Section = Field(default_factory=Section)
    earlierContext: Section = Field(default_factory=Section)
    longTermBackground: Section = Field(default_factory=Section)


class Fact(BaseModel):
    id: str
    content: str
    category: str = "context"
    confidence: float = 0.5
    createdAt: str
    source: str
    sourceError: str | None = None
    categoryExtension: str | None = None
    topics: list[str] | None = None
    schemaVersion: int | None = None
    status: str | None = None
    scope: dict[str, str | None] | None = None
    revision: int | None = None
    updatedAt: str | None = None
    consolidatedAt: str | None = None
    consolidatedFrom: list[str] | None = None

    @field_validator("createdAt")
    @classmethod
    def _created(cls, value: str) -> str:
        return _timestamp(value)

    @field_validator("confidence")
    @classmethod
    def _confidence(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError("confidence outside [0, 1]")
        return value


class MemoryResponse(BaseModel):
    version: str = "1.0"
    revision: int | None = None
    lastUpdated: str
    user: UserContext = Field(default_factory=UserContext)
    history: HistoryContext = Field(default_factory=HistoryContext)
    facts: list[Fact] = Field(default_factory=list)

    @field_validator("lastUpdated")
    @classmethod
    def _last(cls, value: str) -> str:
        return _timestamp(value)


def check_document(data: Any) -> MemoryResponse:
    """``data`` cast as the router casts it; raises ``ValidationError`` if it would fail."""
    assert isinstance(data, dict), f"a memory document must be a dict, not {type(data)}"
    return MemoryResponse(**data)


def _fact_value_error(exc: ValueError) -> int:
    if exc.args and exc.args[0] == "Duplicate fact":
        return 409
    return 400  # "confidence", "agent_name" and any other ValueError


def call(manager: Any, operation: str, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """Run ``manager.<operation>`` as the router does; ``(status, body)``.

    Bodies of 200 answers are the :class:`MemoryResponse` (``create_fact``: of the document
    half); error bodies are the exception's class name."""
    method = getattr(manager, operation)
    try:
        result = method(*args, **kwargs)
    except NotImplementedError as exc:
        return 501, type(exc).__name__
    except KeyError as exc:
        return 404, type(exc).__name__
    except ValueError as exc:
        return _fact_value_error(exc), type(exc).__name__
    except MemoryConflictError as exc:
        return 409, type(exc).__name__
    except MemoryCorruptionError as exc:
        return 500, type(exc).__name__
    except OSError as exc:
        return 500, type(exc).__name__
    if operation == "create_fact":
        document, fact_id = result
        if fact_id is None:
            return 409, "evicted by max_facts"
        return 200, check_document(document)
    if operation in ("delete_memory", "add", "add_nowait"):
        return 200, result
    try:
        return 200, check_document(result)
    except ValidationError as exc:
        raise AssertionError(f"{operation}: a document the gateway rejects: {exc}") from None
