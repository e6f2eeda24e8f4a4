"""The web console's sign-in: sessions of this process, their cookie, and CSRF tokens.

Signing in with an API key opens a session: a random id, sent as the cookie
:data:`COOKIE` (``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, and ``Secure`` when the
request came over TLS, by its scheme or ``X-Forwarded-Proto: https``). The key's text stays in
the process, in the session, and is checked again on every request, so a revoked key ends its
sessions at once. Only the SHA-256 of a session id is kept. A session ends on logout, after
:data:`IDLE` without a request, or :data:`LIFETIME` after sign-in; a restart ends them all.

Every form carries the session's CSRF token (random, compared in constant time), and a POST is
refused unless its ``Origin`` (or, without one, its ``Referer``) is the console's own. The
sign-in form, before there is a session, carries a token that must match the cookie
:data:`LOGIN_COOKIE` set with the form (a double-submit token).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "memory_sql_console"
LOGIN_COOKIE = "memory_sql_console_login"
PATH = "/console"
IDLE = 8 * 3600.0
"""Seconds without a request after which a session ends."""
LIFETIME = 24 * 3600.0
"""Seconds after sign-in after which a session ends, in use or not."""
CAPACITY = 10_000
"""Sessions kept at most: signing in past it ends the oldest."""


@dataclass
class Session:
    token: str  # the API key's text
    tenant_id: str
    csrf: str
    opened: float
    seen: float
    notice: str | None = None  # what a change did, shown once by the page it redirects to


class Sessions:
    """The open sessions of this process; safe to share between threads."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, token: str, tenant_id: str) -> tuple[str, Session]:
        """A new session for the key ``token`` acting for ``tenant_id``: its id (the cookie's
        value) and the session."""
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        session = Session(token, tenant_id, secrets.token_urlsafe(32), now, now)
        with self._lock:
            if len(self._sessions) >= CAPACITY:
                oldest = min(self._sessions, key=lambda k: self._sessions[k].opened)
                del self._sessions[oldest]
            self._sessions[_digest(session_id)] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session ``session_id`` names (and it is marked used), or None."""
        if not session_id:
            return None
        now = time.monotonic()
        with self._lock:
            digest = _digest(session_id)
            session = self._sessions.get(digest)
            if session is None:
                return None
            if now - session.seen > IDLE or now - session.opened > LIFETIME:
                del self._sessions[digest]
                return None
            session.seen = now
            return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._sessions.pop(_digest(session_id), None)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def over_tls(request: Request) -> bool:
    """Whether the browser reached the console over TLS (directly, or through a proxy that
    says so in ``X-Forwarded-Proto``)."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def set_cookie(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=over_tls(request),
    )


def clear_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(
        name, path=PATH, httponly=True, samesite="strict", secure=over_tls(request)
    )


def same_token(given: str | None, expected: str | None) -> bool:
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this console: its ``Origin`` (else ``Referer``)
    names this host, with the scheme the browser used. A request with neither (not sent by a
    browser) passes this check; the CSRF token still has to match."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return True
        origin = referer
    if origin == "null":
        return False
    parts = urlsplit(origin)
    scheme = "https" if over_tls(request) else request.url.scheme
    host = request.headers.get("host", "")
    return parts.scheme == scheme and parts.netloc.lower() == host.lower()
