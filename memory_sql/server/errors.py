"""Every error the service answers, as ``{"error": {"code": …, "message": …}}`` with its status.

:class:`ApiError` is raised by the routes; the library's own exceptions are mapped here once,
so a route never catches them to translate. Nothing answers with a traceback, nor with the
database's own message: an unexpected exception is logged with the request id and answered 500
(by :mod:`.requests`, so the answer still carries the id).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    DuplicateFactError,
    FactNotFoundError,
    ImportFileError,
    InstructionFactError,
    InvalidMessageError,
    InvalidScopeError,
    InvalidUpdateError,
    SchemaOutOfDateError,
    SpoolFullError,
    StorageError,
    UpdateNotFoundError,
    VersionConflictError,
)

logger = logging.getLogger("memory_sql.server")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """What every error answers."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of routes that may answer ``statuses`` (and 401, 500, 503).
    422 is always listed, so that FastAPI does not add its own (validation errors are 400)."""
    described = {
        400: "Bad input; the message names the field",
        401: "No key, or an unknown or revoked one",
        403: "The key's role does not allow this",
        404: "No such user, memory, fact or update (in this tenant)",
        409: "A duplicate fact, or a concurrent change that kept winning",
        412: "If-Match names a version the memory is no longer at",
        413: "Over a configured limit, named in the message",
        415: "A body that is not sent as JSON (Content-Type: application/json)",
        422: "A memory file (memory.json, JSON Lines) that is JSON but not a valid memory",
        500: "An internal error; the message gives the request id",
        503: "The database cannot be reached, or is not at the schema head; or a "
        "conversation was not kept (not_kept: the spool is full), send it again after "
        "Retry-After",
    }
    wanted = sorted({401, 422, 500, 503, *statuses})
    return {s: {"model": ErrorBody, "description": described[s]} for s in wanted}


class ApiError(Exception):
    """An answer other than success: ``status``, a stable ``code`` and a one-line message."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def warning_header(text: str) -> str:
    """``text`` as an HTTP ``Warning`` header's value (code 199, "miscellaneous warning")."""
    return '199 memory-sql "' + text.replace("\\", "").replace('"', "'") + '"'


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", what)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


# (exception class, status, code), the first match wins: subclasses before their bases. The
# database's own errors are not among them: see _storage_error.
_LIBRARY_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (VersionConflictError, 409, "version_conflict"),
    (DuplicateFactError, 409, "duplicate_fact"),
    (InstructionFactError, 422, "instruction"),
    (FactNotFoundError, 404, "not_found"),
    (UpdateNotFoundError, 404, "not_found"),
    (InvalidScopeError, 400, "invalid_request"),
    (InvalidMessageError, 400, "invalid_request"),
    (ImportFileError, 422, "invalid_memory"),
    (InvalidUpdateError, 422, "invalid_memory"),
    (ValueError, 400, "invalid_request"),  # the library's documented bad-input errors
)


def library_status(exc: BaseException) -> tuple[int, str] | None:
    """The status and code the service answers for the library's error ``exc`` (None: not one
    of the documented bad-input or conflict errors)."""
    for cls, status, code in _LIBRARY_ERRORS:
        if isinstance(exc, cls):
            return status, code
    return None


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into the error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        given = request.headers.get("content-type")
        # FastAPI reads a body as JSON when it is sent as JSON or with no Content-Type at all
        # (else it hands the bytes to the model, which then "should be a valid dictionary").
        if given and not _is_json(given) and any(_in_body(error) for error in errors):
            return error_response(
                415,
                "unsupported_media_type",
                f"the request body must be JSON, sent with Content-Type: application/json "
                f"(not {given})",
            )
        for error in errors:
            if error.get("type") == "json_invalid":
                return error_response(400, "invalid_request", json_error(error, exc.body))
        return error_response(400, "invalid_request", describe(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 408: "timeout", 413: "too_large"}.get(
            exc.status_code, "http_error"
        )
        return error_response(
            exc.status_code, code, str(exc.detail), dict(exc.headers) if exc.headers else None
        )

    for cls, status, code in _LIBRARY_ERRORS:
        app.add_exception_handler(cls, _library_handler(status, code))
    app.add_exception_handler(SpoolFullError, _spool_full)
    app.add_exception_handler(RecursionError, _too_deep)
    app.add_exception_handler(StorageError, _storage_error)
    app.add_exception_handler(SchemaOutOfDateError, _storage_error)


def _library_handler(status: int, code: str) -> Any:
    async def handle(_request: Request, exc: Exception) -> JSONResponse:
        return error_response(status, code, " ".join(str(exc).split()))

    return handle


async def _storage_error(request: Request, exc: Exception) -> JSONResponse:
    """The database failed: 503 when it cannot be reached, answers too slowly, or its schema is
    behind (try again later), else 500 (a bug or a misconfiguration). Neither says more than
    the request id to the client: the database's own message, with its host and names, goes
    to the log."""
    request_id = getattr(request.state, "request_id", "-")
    detail = " ".join(str(exc).split())
    cause = exc.__cause__
    if isinstance(exc, SchemaOutOfDateError) or isinstance(cause, sa_exc.OperationalError):
        logger.warning("database unavailable: %s", detail)
        return error_response(
            503, "database_unavailable", f"the database is unavailable (request id {request_id})"
        )
    logger.error("database error: %s", detail)
    return internal_error(request_id)


async def _too_deep(_request: Request, _exc: Exception) -> JSONResponse:
    """JSON nested deeper than the parser goes (``[[[[…]]]]``): bad input, not a crash."""
    return error_response(
        400, "invalid_request", "the request body's JSON is nested too deeply to be read"
    )


async def _spool_full(_request: Request, exc: Exception) -> JSONResponse:
    """A conversation neither the queue nor the spool could take: 503 with ``Retry-After``;
    nothing of it was kept, so the client sends it again."""
    retry_after = max(1, round(getattr(exc, "retry_after", 1)))
    return error_response(
        503,
        "not_kept",
        " ".join(str(exc).split()),
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(request_id: str) -> JSONResponse:
    """500, naming only the request id (the log has the rest)."""
    return error_response(500, "internal", f"internal error (request id {request_id})")


def _in_body(error: Any) -> bool:
    location = error.get("loc", ())
    return bool(location) and location[0] == "body"


def _is_json(content_type: str | None) -> bool:
    """Whether ``content_type`` is JSON's (``application/json``, ``application/x+json``)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def json_error(error: Any, body: Any) -> str:
    """A JSON decode error in plain words: what the parser expected, and where (line and
    column of the body, counted from 1)."""
    location = error.get("loc", ())
    position = location[1] if len(location) > 1 and isinstance(location[1], int) else None
    reason = (error.get("ctx") or {}).get("error") or "not valid JSON"
    if position is None:
        return f"the request body is not valid JSON: {reason}"
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return (
        f"the request body is not valid JSON: {reason} at line {line}, column {column} "
        f"(character {position + 1})"
    )


def describe(errors: Any) -> str:
    """Pydantic's errors as one line naming each field: ``body.messages[3].content: …``."""
    parts = []
    for error in list(errors)[:5]:
        location = _location(error.get("loc", ()))
        message = error.get("msg", "invalid")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts) or "invalid request"


def _location(loc: Any) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
