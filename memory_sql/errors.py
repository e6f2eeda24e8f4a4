"""The exceptions memory_sql raises. Every one derives from :class:`MemorySQLError`."""

from __future__ import annotations


class MemorySQLError(Exception):
    """Root of every error raised by memory_sql."""


class InvalidScopeError(MemorySQLError, ValueError):
    """A tenant_id, user_id or agent_name does not match its pattern.

    ``field`` names the offending argument and ``value`` holds what was given.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"invalid {field} {value!r}: {rule}")


class VersionConflictError(MemorySQLError):
    """A save named a version that is no longer the stored one: reload and re-apply."""

    def __init__(self, scope: str, expected: int, actual: int | None) -> None:
        self.scope = scope
        self.expected = expected
        self.actual = actual
        found = "no stored memory" if actual is None else f"version {actual}"
        super().__init__(f"memory {scope} changed: save expected version {expected}, found {found}")


class DuplicateFactError(MemorySQLError, ValueError):
    """Two facts of one memory have the same casefold key (see :func:`memory_sql.fact_key`)."""

    def __init__(self, scope: str, content: str | None = None) -> None:
        self.scope = scope
        self.content = content
        what = f"{content[:80]!r}" if content else "a fact"
        super().__init__(f"memory {scope}: {what} duplicates another fact (casefold match)")


class SchemaOutOfDateError(MemorySQLError):
    """The database is not at the schema revision this code needs."""

    def __init__(
        self,
        url: str,
        current: str | None,
        head: str,
        *,
        newer: bool = False,
        unstamped: bool = False,
    ) -> None:
        self.current = current
        self.head = head
        if unstamped:
            message = (
                f"database {url} has memory_sql tables but no schema revision (its "
                "alembic_version table is missing or empty): memory_sql does not know what "
                "they hold and leaves them alone; restore the revision stamp, or move the "
                "tables away"
            )
        elif newer:
            message = (
                f"database {url} is at revision {current}, which this version of memory_sql "
                f"does not know (its newest is {head}): upgrade memory_sql"
            )
        else:
            at = "has no memory_sql tables" if current is None else f"is at revision {current}"
            message = (
                f"database {url} {at}, this version of memory_sql needs {head}: "
                f"run `memory-sql db upgrade --url {url}` (from Python: memory_sql.upgrade)"
            )
        super().__init__(message)


class StorageError(MemorySQLError):
    """The storage backend failed (database unreachable, disk error, corrupt file)."""


class SpoolFullError(MemorySQLError):
    """A conversation can be neither queued (its database is unavailable) nor spooled (the
    spool, or the tenant's share of it, is full, or its file cannot be written): it was not
    taken, and the caller should send it again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LeaseLostError(MemorySQLError):
    """A run's queue row is no longer leased to it (its lease expired and another worker took
    the row): what the run would have saved is rolled back, since the other run saves it."""


class InvalidMessageError(MemorySQLError, ValueError):
    """A conversation message is not one memory_sql can read.

    ``index`` is the message's position in the list given (``None`` when the list itself is
    wrong) and ``problem`` says what is wrong with it.
    """

    def __init__(self, index: int | None, problem: str) -> None:
        self.index = index
        self.problem = problem
        where = "messages" if index is None else f"message {index}"
        super().__init__(f"{where}: {problem}")


class ConfigError(MemorySQLError, ValueError):
    """A setting, a config file or a pattern file is invalid.

    The message names the offending key (``key``) or file (``path``, with ``line`` when known)
    and says what is allowed. Secret values are never part of it.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        path: str | None = None,
        line: int | None = None,
    ) -> None:
        self.key = key
        self.path = path
        self.line = line
        super().__init__(message)


class LLMError(MemorySQLError):
    """The memory LLM could not be asked: no model configured, a timeout, a refused
    connection, an HTTP error status, or a reply without text.

    The message names the endpoint (``endpoint``) and the cause; ``status`` is the HTTP status
    when the server answered with one; ``transient`` says whether trying again may help (a
    timeout, a lost connection, HTTP 408, 409, 429 or 5xx). The API key is never part of it.
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        status: int | None = None,
        transient: bool = False,
    ):
        self.endpoint = endpoint
        self.status = status
        self.transient = transient
        super().__init__(message)


class InvalidUpdateError(MemorySQLError, ValueError):
    """The LLM's reply is not a memory update of the expected shape; ``reason`` says why, and
    ``rejected`` counts the parts of it that were refused, by reason (empty when the reply held
    no JSON object at all)."""

    def __init__(self, reason: str, *, rejected: dict[str, int] | None = None) -> None:
        self.reason = reason
        self.rejected = dict(rejected or {})
        super().__init__(f"invalid memory update from the LLM: {reason}")


class ImportFileError(MemorySQLError, ValueError):
    """An import file is malformed; nothing was written.

    ``source`` names the file, ``line`` the offending line (None for a whole-file problem) and
    ``problem`` says what is wrong.
    """

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = source if line is None else f"{source}, line {line}"
        super().__init__(f"{where}: {problem}")


class FactNotFoundError(MemorySQLError, LookupError):
    """The memory has no fact with that id."""

    def __init__(self, scope: str, fact_id: str) -> None:
        self.scope = scope
        self.fact_id = fact_id
        super().__init__(f"memory {scope} has no fact {fact_id!r}")


class UpdateNotFoundError(MemorySQLError, LookupError):
    """No row of the update queue matches the key given (``key``)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no update in the queue matches {key}")


class CapabilityMissingError(MemorySQLError, NotImplementedError):
    """The storage in use lacks a capability the call needs (see
    :mod:`memory_sql.storage.capabilities`): the JSON-file store keeps no update queue, no
    history, no LLM budgets, for example. ``capability`` names it, ``storage`` the backend."""

    def __init__(self, capability: str, storage: str, needed_by: str | None = None) -> None:
        self.capability = capability
        self.storage = storage
        self.needed_by = needed_by
        who = f"{needed_by} needs" if needed_by else "this needs"
        super().__init__(
            f"{who} the storage capability {capability!r}, which {storage} lacks: use a SQL "
            "database (sqlite:///… or postgresql+psycopg://…) as storage"
        )
