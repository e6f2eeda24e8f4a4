"""The ASGI middleware every request passes: its id, the body-size limit, metrics and the log.

- A request id: the client's ``X-Request-ID`` when it is short and plain, else a new one;
  answered in ``X-Request-ID``, and given to every log record made while the request runs
  (:class:`RequestIdFilter` puts it in ``record.request_id``; ``-`` outside requests).
- A body over ``server_max_body_bytes`` is refused with 413 naming the limit, from its
  ``Content-Length`` before it is read, or as soon as a streamed body passes the limit; a body
  still arriving ``server_body_timeout_seconds`` after the request began (a client sending a
  byte now and then) is cut off with 408 and the connection closed.
- An exception no handler took is logged with the request id and answered 500 naming the id;
  a client that disconnected mid-request is logged as status 499, without a traceback.
- One access-log line per request (``memory_sql.server.access``, JSON): method (of the
  metrics' closed set), route
  template (never the path, which holds user ids), status, duration, key id and tenant.
  No secrets and no message text. The same fields go to the ``request_log`` given (the web
  console's :class:`~memory_sql.server.request_log.RequestLog`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..models import utcnow
from .errors import error_response, internal_error
from .metrics import method_label
from .request_log import LoggedRequest, RequestLog

access_log = logging.getLogger("memory_sql.server.access")
logger = logging.getLogger("memory_sql.server")

CLIENT_CLOSED_REQUEST = 499
"""The status logged (and counted) for a request whose client disconnected before it was
read (nginx's convention): not a 500, and nothing is answered."""
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_current_request: ContextVar[str] = ContextVar("memory_sql_request_id", default="-")


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (for a format's ``%(request_id)s``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _current_request.get()
        return True


class RequestMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        metrics: Any,
        body_timeout: float = 30.0,
        request_log: RequestLog | None = None,
    ) -> None:
        self.app = app
        self.request_log = request_log
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        token = _current_request.set(request_id)
        status = [500]

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    (b"x-request-id", request_id.encode("ascii")),
                ]
            await send(message)

        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError:
            length = 0
        started_response = [False]
        gone = [False]  # the client disconnected before any answer

        async def send_tracked(message: Message) -> None:
            started_response[0] = True
            await send_with_id(message)

        try:
            if length > self.max_body_bytes:
                response = error_response(413, "too_large", self._too_large(length))
                await response(scope, receive, send_with_id)
            else:
                await self.app(scope, self._limited(receive, gone, started_response), send_tracked)
        except Exception as exc:
            if gone[0] or isinstance(exc, ClientDisconnect):
                # The client went away mid-request: nobody to answer, and not an error.
                status[0] = CLIENT_CLOSED_REQUEST
                return
            logger.exception("request %s failed", request_id)
            if started_response[0]:
                raise  # a streamed body broke off: nothing can be answered any more
            await internal_error(request_id)(scope, receive, send_with_id)
        finally:
            if gone[0]:
                status[0] = CLIENT_CLOSED_REQUEST
            self._record(scope, state, status[0], time.perf_counter() - started)
            _current_request.reset(token)

    def _record(self, scope: Scope, state: dict[str, Any], status: int, elapsed: float) -> None:
        """The request's metrics and its access-log line (also when it raised: then 500)."""
        template = getattr(scope.get("route"), "path", None) or "unmatched"
        method = method_label(scope["method"])
        self.metrics.observe_request(method, template, status, elapsed)
        line = {
            "request_id": state["request_id"],
            "method": method,
            "route": template,
            "status": status,
            "ms": round(elapsed * 1000, 2),
            "key_id": state.get("key_id"),
            "tenant": state.get("tenant_id"),
        }
        access_log.info("%s", json.dumps(line))
        if self.request_log is not None:
            self.request_log.add(
                LoggedRequest(
                    utcnow(),
                    line["request_id"],
                    method,
                    template,
                    status,
                    line["ms"],
                    line["key_id"],
                    line["tenant"],
                )
            )

    def _limited(self, receive: Receive, gone: list[bool], answering: list[bool]) -> Receive:
        """``receive`` within the body's size and time limits; ``gone[0]`` set when the
        client disconnects before ``answering[0]`` (a response started)."""
        seen = 0
        deadline = time.monotonic() + self.body_timeout

        async def receive_limited() -> Message:
            nonlocal seen
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                raise HTTPException(
                    408,
                    f"the request body did not arrive within server_body_timeout_seconds "
                    f"({self.body_timeout:g})",
                    headers={"Connection": "close"},
                ) from None
            if message["type"] == "http.disconnect" and not answering[0]:
                gone[0] = True
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise HTTPException(413, self._too_large(seen, streamed=True))
            return message

        return receive_limited

    def _too_large(self, size: int, *, streamed: bool = False) -> str:
        what = f"at least {size}" if streamed else str(size)
        return f"request body is {what} bytes, over server_max_body_bytes ({self.max_body_bytes})"
