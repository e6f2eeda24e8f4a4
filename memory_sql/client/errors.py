"""What the client raises for the service's error bodies: the library's own exceptions.

Every error the service answers, ``{"error": {"code": …, "message": …}}``, becomes a
:class:`ServiceError` that is also the library exception a Python caller of the same operation
would catch (``except VersionConflictError`` works against the service as against the
library); its ``status``, ``code`` and ``message`` are the answer's. :func:`error_for` holds
the mapping, by status and code:

=====  =====================  ==================================================================
409    version_conflict       :class:`VersionConflict` (a :class:`~memory_sql.VersionConflictError`)
409    duplicate_fact         :class:`DuplicateFact` (a :class:`~memory_sql.DuplicateFactError`)
412    precondition_failed    :class:`StaleVersion` (a :class:`~memory_sql.VersionConflictError`:
                              the version given is no longer the memory's; ``actual`` is the new)
404    not_found              :class:`FactNotFound` for a fact's route, :class:`UpdateNotFound`
                              for the queue's, else :class:`NotFound` (a ``LookupError``)
400    invalid_request        :class:`InvalidRequest` (a ``ValueError``)
401    unauthorized           :class:`Unauthorized` (a ``PermissionError``)
403    forbidden              :class:`Forbidden` (a ``PermissionError``)
413    too_large              :class:`TooLarge` (a ``ValueError``)
422    invalid_memory         :class:`InvalidMemory` (a ``ValueError``)
503    not_kept               :class:`NotKept` (a :class:`~memory_sql.SpoolFullError`, with
                              ``retry_after`` from the answer's ``Retry-After``)
503    (other)                :class:`Unavailable` (a :class:`~memory_sql.StorageError`)
other                         :class:`ServiceError`
=====  =====================  ==================================================================

No answer at all (refused, timed out, cut off) is :class:`Unreachable`, also a
:class:`~memory_sql.StorageError`: the memory cannot be reached, as when a database cannot.
"""

from __future__ import annotations

import re

from ..errors import (
    DuplicateFactError,
    FactNotFoundError,
    MemorySQLError,
    SpoolFullError,
    StorageError,
    UpdateNotFoundError,
    VersionConflictError,
)


class ServiceError(MemorySQLError):
    """An error answer of the memory service: its HTTP ``status``, ``code`` and ``message``."""

    def __init__(self, status: int | None, code: str, message: str) -> None:
        # The library classes mixed in below take other arguments; their attributes are set
        # by the subclasses, and every one's message is the service's own.
        Exception.__init__(self, message)
        self.status = status
        self.code = code
        self.message = message


class VersionConflict(ServiceError, VersionConflictError):
    """409 ``version_conflict``: a concurrent change kept winning; nothing was changed."""

    def __init__(self, status: int, code: str, message: str, *, scope: str = "") -> None:
        super().__init__(status, code, message)
        self.scope = scope
        self.expected = -1
        self.actual = None


class StaleVersion(ServiceError, VersionConflictError):
    """412 ``precondition_failed``: the memory is no longer at ``expected``; it is at
    ``actual`` (None when the service did not say); nothing was changed."""

    def __init__(
        self, status: int, code: str, message: str, *, scope: str = "", expected: int = -1
    ) -> None:
        super().__init__(status, code, message)
        self.scope = scope
        self.expected = expected
        now = re.search(r"it is now (\d+)", message)
        self.actual = int(now.group(1)) if now else None


class DuplicateFact(ServiceError, DuplicateFactError):
    """409 ``duplicate_fact``: the memory already has a fact with that text (casefold)."""

    def __init__(self, status: int, code: str, message: str, *, scope: str = "") -> None:
        super().__init__(status, code, message)
        self.scope = scope
        self.content = None


class NotFound(ServiceError, LookupError):
    """404: no such user, memory or history in the key's tenant."""


class FactNotFound(NotFound, FactNotFoundError):
    """404 on a fact's route: the memory has no such fact."""

    def __init__(self, status: int, code: str, message: str, *, scope: str = "") -> None:
        super().__init__(status, code, message)
        self.scope = scope
        self.fact_id = ""


class UpdateNotFound(NotFound, UpdateNotFoundError):
    """404 on the queue's routes: no queued update has that key."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(status, code, message)
        self.key = ""


class InvalidRequest(ServiceError, ValueError):
    """400: bad input; the message names the field."""


class Unauthorized(ServiceError, PermissionError):
    """401: no key, or an unknown or revoked one."""


class Forbidden(ServiceError, PermissionError):
    """403: the key's role does not allow this, or it cannot act for that tenant."""


class TooLarge(ServiceError, ValueError):
    """413: over a limit the message names."""


class InvalidMemory(ServiceError, ValueError):
    """422: a memory file that is JSON but not a valid memory (the message names the line)."""


class NotKept(ServiceError, SpoolFullError):
    """503 ``not_kept``: the conversation was not kept; send it again after ``retry_after``."""

    def __init__(self, status: int, code: str, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(status, code, message)
        self.retry_after = retry_after


class Unavailable(ServiceError, StorageError):
    """503: the service's database cannot be reached or is not at the schema head."""


class Unreachable(ServiceError, StorageError):
    """No answer from the service: connection refused, timed out, or cut off."""

    def __init__(self, message: str) -> None:
        super().__init__(None, "unreachable", message)


def error_for(
    status: int,
    code: str,
    message: str,
    *,
    what: str = "",
    scope: str = "",
    expected: int | None = None,
    retry_after: str | None = None,
) -> ServiceError:
    """The exception for an error answer. ``what`` names the kind of thing the request was
    about (``"fact"``, ``"update"``: which 404 it is); ``scope`` and ``expected`` (the
    version sent) fill the library exceptions' attributes."""
    if status == 409 and code == "duplicate_fact":
        return DuplicateFact(status, code, message, scope=scope)
    if status == 409:
        return VersionConflict(status, code, message, scope=scope)
    if status == 412:
        return StaleVersion(
            status, code, message, scope=scope, expected=-1 if expected is None else expected
        )
    if status == 404:
        if what == "fact":
            return FactNotFound(status, code, message, scope=scope)
        if what == "update":
            return UpdateNotFound(status, code, message)
        return NotFound(status, code, message)
    if status == 503 and code == "not_kept":
        try:
            seconds = float(retry_after) if retry_after else 1.0
        except ValueError:
            seconds = 1.0
        return NotKept(status, code, message, retry_after=seconds)
    simple: dict[int, type[ServiceError]] = {
        400: InvalidRequest,
        401: Unauthorized,
        403: Forbidden,
        413: TooLarge,
        422: InvalidMemory,
        503: Unavailable,
    }
    return simple.get(status, ServiceError)(status, code, message)
