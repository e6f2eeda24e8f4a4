"""The service's routes as requests: each function builds the :class:`Call` of one route,
which the sync and the async client send alike (:mod:`.clients`). A new route or parameter is
one function here and one method in each client."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from ..models import MemoryDocument
from ..scope import Scope
from .errors import ServiceError, error_for
from .results import (
    Context,
    EventPage,
    FactChange,
    FactPage,
    Forgotten,
    Imported,
    Queued,
    QueueStatus,
    Replaced,
    Requeued,
)

T = TypeVar("T")


class Unset:
    """The default of a field an update leaves as it is (``None`` may be a value)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (``parse``) or its error (``what``: the kind
    of thing a 404 is about; ``scope`` and ``expected`` for the exceptions' attributes)."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    what: str = ""
    scope: str = ""
    expected: int | None = None

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        params = {k: v for k, v in self.params.items() if v is not None}
        return http.build_request(
            self.method,
            self.path,
            params=params,
            json=self.json,
            content=self.content,
            headers=self.headers,
        )

    def answer(self, response: httpx.Response) -> T:
        """The parsed answer, or the exception its error body stands for."""
        if response.status_code >= 400:
            raise self.error(response)
        return self.parse(response)

    def error(self, response: httpx.Response) -> ServiceError:
        code, message = "http_error", response.text[:500] or response.reason_phrase
        try:
            body = response.json()
            code, message = body["error"]["code"], body["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        return error_for(
            response.status_code,
            code,
            message,
            what=self.what,
            scope=self.scope,
            expected=self.expected,
            retry_after=response.headers.get("Retry-After"),
        )


def _model(cls: Any) -> Callable[[httpx.Response], Any]:
    return lambda response: cls.model_validate(response.json())


def _user(user_id: str) -> str:
    """The path of a user; a malformed id raises :class:`~memory_sql.InvalidScopeError` here,
    as the library would, without a request."""
    return "/v1/users/" + quote(Scope.of(user_id=user_id).user_id, safe="")


def _if_match(version: int | str | None) -> dict[str, str]:
    if version is None:
        return {}
    return {"If-Match": "*" if version == "*" else f'"{int(version)}"'}


def _scope(user_id: str, agent_name: str | None) -> str:
    return f"{user_id}/{agent_name or '-'}"


def _expected(version: int | str | None) -> int | None:
    return version if isinstance(version, int) else None


def queue_conversation(
    user_id: str,
    messages: Iterable[Mapping[str, Any]],
    *,
    thread_id: str,
    agent_name: str | None,
    immediate: bool,
) -> Call[Queued]:
    body = {
        "user_id": user_id,
        "agent_name": agent_name,
        "thread_id": thread_id,
        "messages": [dict(m) for m in messages],
        "immediate": immediate,
    }
    return Call("POST", "/v1/conversations", _model(Queued), json=body)


def context(
    user_id: str,
    *,
    agent_name: str | None,
    query: str | None,
    messages: Iterable[Mapping[str, Any]] | None,
) -> Call[Context]:
    params = {"agent_name": agent_name}
    if messages is not None:
        body = {"messages": [dict(m) for m in messages]}
        return Call("POST", _user(user_id) + "/context", _model(Context), params, json=body)
    return Call("GET", _user(user_id) + "/context", _model(Context), {**params, "q": query})


def _document(response: httpx.Response) -> MemoryDocument:
    doc = MemoryDocument.model_validate(response.json())
    tag = response.headers.get("ETag", "").strip('W/"')
    doc.version = int(tag) if tag.isdigit() else int(response.json().get("revision") or 0)
    return doc


def get_memory(user_id: str, *, agent_name: str | None) -> Call[MemoryDocument]:
    return Call("GET", _user(user_id) + "/memory", _document, {"agent_name": agent_name})


def put_memory(
    user_id: str,
    memory: MemoryDocument | Mapping[str, Any],
    *,
    agent_name: str | None,
    version: int | str | None,
) -> Call[Replaced]:
    body = memory.to_deerflow() if isinstance(memory, MemoryDocument) else dict(memory)
    return Call(
        "PUT",
        _user(user_id) + "/memory",
        _model(Replaced),
        {"agent_name": agent_name},
        json=body,
        headers=_if_match(version),
        scope=_scope(user_id, agent_name),
        expected=_expected(version),
    )


def list_facts(
    user_id: str,
    *,
    agent_name: str | None,
    q: str | None,
    category: str | None,
    min_confidence: float | None,
    limit: int,
    offset: int,
) -> Call[FactPage]:
    params = {
        "agent_name": agent_name,
        "q": q,
        "category": category,
        "min_confidence": min_confidence,
        "limit": limit,
        "offset": offset,
    }
    return Call("GET", _user(user_id) + "/facts", _model(FactPage), params)


def add_fact(
    user_id: str,
    content: str,
    *,
    category: str,
    confidence: float,
    source_thread_id: str | None,
    agent_name: str | None,
    version: int | str | None,
) -> Call[FactChange]:
    body = {
        "content": content,
        "category": category,
        "confidence": confidence,
        "source_thread_id": source_thread_id,
    }
    return Call(
        "POST",
        _user(user_id) + "/facts",
        _model(FactChange),
        {"agent_name": agent_name},
        json=body,
        headers=_if_match(version),
        scope=_scope(user_id, agent_name),
        expected=_expected(version),
    )


def update_fact(
    user_id: str,
    fact_id: str,
    *,
    agent_name: str | None,
    version: int | str | None,
    **changes: Any,
) -> Call[FactChange]:
    body = {name: value for name, value in changes.items() if value is not UNSET}
    return Call(
        "PATCH",
        _user(user_id) + "/facts/" + quote(str(fact_id), safe=""),
        _model(FactChange),
        {"agent_name": agent_name},
        json=body,
        headers=_if_match(version),
        what="fact",
        scope=_scope(user_id, agent_name),
        expected=_expected(version),
    )


def delete_fact(
    user_id: str, fact_id: str, *, agent_name: str | None, version: int | str | None
) -> Call[FactChange]:
    return Call(
        "DELETE",
        _user(user_id) + "/facts/" + quote(str(fact_id), safe=""),
        _model(FactChange),
        {"agent_name": agent_name},
        headers=_if_match(version),
        what="fact",
        scope=_scope(user_id, agent_name),
        expected=_expected(version),
    )


def fact_history(
    user_id: str, fact_id: str, *, agent_name: str | None, after: str | None, limit: int
) -> Call[EventPage]:
    return Call(
        "GET",
        _user(user_id) + "/facts/" + quote(str(fact_id), safe="") + "/history",
        _model(EventPage),
        {"agent_name": agent_name, "after": after, "limit": limit},
        what="fact",
    )


def changes(
    user_id: str, *, agent_name: str | None, after: str | None, limit: int
) -> Call[EventPage]:
    return Call(
        "GET",
        _user(user_id) + "/changes",
        _model(EventPage),
        {"agent_name": agent_name, "after": after, "limit": limit},
    )


def forget_user(user_id: str) -> Call[Forgotten]:
    return Call("DELETE", _user(user_id), _model(Forgotten))


def import_jsonl(data: bytes | str) -> Call[Imported]:
    content = data.encode("utf-8") if isinstance(data, str) else data
    headers = {"Content-Type": "application/x-ndjson"}
    return Call("POST", "/v1/import", _model(Imported), content=content, headers=headers)


def export_jsonl() -> Call[str]:
    return Call("GET", "/v1/export", lambda response: response.text)


def reports(*, days: int, largest: int) -> Call[dict[str, Any]]:
    return Call("GET", "/v1/reports", lambda r: r.json(), {"days": days, "largest": largest})


def queue_status(*, failed_only: bool, user_id: str | None, limit: int) -> Call[QueueStatus]:
    params = {"failed_only": failed_only, "user_id": user_id, "limit": limit}
    return Call("GET", "/v1/queue", _model(QueueStatus), params)


def retry_updates(keys: Iterable[str] | None) -> Call[Requeued]:
    body = {"keys": None if keys is None else [str(k) for k in keys]}
    return Call("POST", "/v1/queue/retry", _model(Requeued), json=body, what="update")


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", lambda r: r.json())


def ready() -> Call[dict[str, Any]]:
    return Call("GET", "/readyz", lambda r: r.json())
