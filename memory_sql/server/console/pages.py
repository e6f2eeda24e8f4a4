"""The web console's pages under ``/console``: sign-in and out, users, a user's memory and a
fact's history, the queue, reports, keys and the request log.

Every page but the sign-in needs a session (:mod:`.sessions`); its key is checked again on
each request, its tenant is the key's (an operator key's: the one named at sign-in), and all
database work runs inside ``caller.acting()``, as the API's routes do. A POST needs the
session's CSRF token and a same-origin ``Origin``/``Referer``; a change done answers 303 to
the page it changed, which says what was done once (a reload posts nothing again); a change
refused by the library (a stale version, a duplicate fact, bad input) is shown on the page with
the status the API would answer. A failure page is titled for what failed; a path with no page
gets the console's own 404 (:mod:`memory_sql.server.console`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from ... import ops
from ...errors import StorageError, UpdateNotFoundError
from ...intake.guard import redacted_document
from ...models import Fact, MemoryDocument, format_timestamp, utcnow
from ...ops import history
from ...ops.reports import build_report
from ...queue import manage
from ...schema import API_KEY_ROLES, SECTION_NAMES
from ...scope import Scope
from ...storage.users import UserSummary
from ..auth import Caller
from ..errors import library_status
from ..keys import ApiKey, create_key, list_keys, revoke_key
from ..reads import ReadTarget
from ..routes.queue import without_endpoint
from ..state import ServerState
from . import charts
from .sessions import (
    COOKIE,
    LOGIN_COOKIE,
    Session,
    Sessions,
    clear_cookie,
    same_origin,
    same_token,
    set_cookie,
)

router = APIRouter(prefix="/console", include_in_schema=False)

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""Sent with every console page: no script at all, nothing from elsewhere, never framed."""

HISTORY_TEXTS = (("content_before", "Before"), ("content_after", "After"), ("content", "Text"))
"""The text fields a fact's history events may carry, in the order shown (events without
them show the category and confidence only)."""
_EVENT_FIELDS = {"version", "fact_id", "event", "category", "confidence", "occurred_at"}

_templates = Environment(
    loader=PackageLoader("memory_sql.server.console", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters["q"] = lambda text: quote(str(text), safe="")


def when(moment: datetime | str | None) -> Markup:
    """A moment as ``2026-12-04 10:31:05 UTC``, the full ISO form in its ``title`` (an ISO
    text is read first; a text that is not one is shown as it is)."""
    if not moment:
        return Markup("")
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
        except ValueError:
            return escape(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    iso = format_timestamp(moment)
    shown = moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(iso, shown)


def counted(count: int, noun: str) -> str:
    """``1 memory``, ``2 memories``: ``noun`` is the plural, made singular for one (its
    last word; ``_`` read as a space, ``llm`` as ``LLM``)."""
    words = noun.replace("_", " ").replace("llm", "LLM").split(" ")
    if count == 1 and words[-1].endswith("ies"):
        words[-1] = words[-1][:-3] + "y"
    elif count == 1 and words[-1].endswith("s"):
        words[-1] = words[-1][:-1]
    return f"{count:,} {' '.join(words)}"


_templates.filters["when"] = when
_templates.globals["counted"] = counted
_templates.globals["csrf"] = lambda console: Markup(
    f'<input type="hidden" name="csrf" value="{escape(console.session.csrf)}">'
)
_NAV = {"memory.html": "users", "history.html": "users"}

T = TypeVar("T")


class SignInNeeded(Exception):
    """No live session: the browser is sent to the sign-in page."""


class Refused(Exception):
    """A request the console will not do: answered with ``status`` and ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Console:
    """One signed-in request: who calls, the session, and how to answer with a page."""

    request: Request
    state: ServerState
    caller: Caller
    session: Session

    @property
    def admin(self) -> bool:
        return self.caller.key.allows("admin")

    @property
    def writer(self) -> bool:
        return self.caller.key.allows("write")

    def need(self, role: str) -> None:
        if not self.caller.key.allows(role):
            raise Refused(403, f"this key's role ({self.caller.key.role}) cannot {role}")

    def failure(self, status: int, message: str, title: str | None = None) -> HTMLResponse:
        """The page saying what failed: ``title`` (else one for ``status``) and ``message``."""
        return failure_page(self, status, message, title)

    def page(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        nav = _NAV.get(template, template.removesuffix(".html"))
        if values.get("notice") is None and values.get("error") is None:
            values["notice"], self.session.notice = self.session.notice, None
        return render(template, status, console=self, nav=nav, **values)

    def done(self, path: str, notice: str) -> RedirectResponse:
        """A change done: 303 to ``path`` (so a reload does not post it again), which shows
        ``notice`` once."""
        self.session.notice = notice
        return redirect(path)


FAILURE_TITLES = {
    400: "Bad input",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    409: "Changed meanwhile",
    413: "Too large",
    422: "Bad input",
}


def failure_page(
    console: Console | None, status: int, message: str, title: str | None = None
) -> HTMLResponse:
    """The console's page for a request that failed with ``status``, titled for what failed
    (``title``, else by the status) and saying why (``message``)."""
    heading = title or FAILURE_TITLES.get(status, "Failed" if status >= 500 else "Not done")
    values = {"console": console, "message": message, "title": heading, "nav": None}
    return render("error.html", status, **values)


def render(template: str, status: int = 200, **values: Any) -> HTMLResponse:
    html = _templates.get_template(template).render(**values)
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def redirect(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303, headers=HEADERS)


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.console_sessions
    return sessions


def signed_in(request: Request) -> Console:
    session_id = request.cookies.get(COOKIE)
    session = _sessions(request).get(session_id)
    if session is None:
        raise SignInNeeded()
    state: ServerState = request.app.state.memory
    key = state.keys.check(session.token)
    if key is None:  # revoked since sign-in
        _sessions(request).close(session_id)
        raise SignInNeeded()
    request.state.key_id = key.key_id
    request.state.tenant_id = session.tenant_id
    return Console(request, state, Caller(key, session.tenant_id), session)


SignedIn = Annotated[Console, Depends(signed_in)]


def _posted(console: SignedIn, csrf: Annotated[str, Form()] = "") -> Console:
    if not same_origin(console.request):
        raise Refused(403, "refused: this form was not sent from the console's own pages")
    if not same_token(csrf, console.session.csrf):
        raise Refused(403, "refused: the form's CSRF token is missing or wrong; reload the page")
    return console


Posted = Annotated[Console, Depends(_posted)]


def _attempt(action: Callable[[], T]) -> tuple[T | None, str | None, int]:
    """``action()``, or the library's refusal of it as (None, message, status)."""
    try:
        return action(), None, 200
    except Refused as exc:
        return None, exc.message, exc.status
    except Exception as exc:
        known = library_status(exc)
        if known is None:
            raise
        return None, " ".join(str(exc).split()), known[0]


def _agent(agent: str | None) -> str | None:
    return agent or None


def _scope(console: Console, user_id: str, agent: str | None) -> Scope | Response:
    """The memory's scope in the caller's tenant, or the page naming what is wrong with it."""
    tenant = console.caller.tenant_id
    scope, problem, code = _attempt(
        lambda: Scope.of(user_id=user_id, agent_name=agent, tenant_id=tenant)
    )
    return console.failure(code, problem or "", "Bad user or agent") if scope is None else scope


# Signing in and out -----------------------------------------------------------------------


@router.get("")
def home() -> Response:
    return redirect("/console/users")


@router.get("/login")
def login_form(request: Request) -> Response:
    return _login_page(request)


def _login_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    token = secrets.token_urlsafe(32)
    response = render("login.html", status, console=None, login_csrf=token, error=error)
    set_cookie(response, request, LOGIN_COOKIE, token)
    return response


@router.post("/login")
def login(
    request: Request,
    api_key: Annotated[str, Form()] = "",
    tenant: Annotated[str, Form()] = "",
    login_csrf: Annotated[str, Form()] = "",
) -> Response:
    if not same_origin(request) or not same_token(login_csrf, request.cookies.get(LOGIN_COOKIE)):
        return _login_page(request, "refused: sign in from the console's own sign-in page", 403)
    state: ServerState = request.app.state.memory
    token = api_key.strip()
    key = state.keys.check(token) if token else None
    if key is None:
        return _login_page(request, "unknown or revoked API key", 401)
    named = tenant.strip()
    try:
        acting = _tenant_for(key, named)
    except ValueError as exc:
        return _login_page(request, str(exc), 400)
    request.state.key_id = key.key_id
    request.state.tenant_id = acting
    session_id, _ = _sessions(request).open(token, acting)
    response = redirect("/console/users")
    set_cookie(response, request, COOKIE, session_id)
    clear_cookie(response, request, LOGIN_COOKIE)
    return response


def _tenant_for(key: ApiKey, named: str) -> str:
    if key.operator:
        if not named:
            raise ValueError("an operator key must name the tenant to act for")
        return Scope.of(tenant_id=named).tenant_id
    if named and named != key.tenant_id:
        raise ValueError("this key cannot act for another tenant")
    return key.tenant_id


@router.post("/logout")
def logout(console: Posted) -> Response:
    _sessions(console.request).close(console.request.cookies.get(COOKIE))
    response = redirect("/console/login")
    clear_cookie(response, console.request, COOKIE)
    return response


# Users and their memories -----------------------------------------------------------------


@router.get("/users")
def users(console: SignedIn, q: str = "") -> Response:
    return _users_page(console, q)


def _users_page(console: Console, q: str = "") -> Response:
    def read(target: ReadTarget) -> list[UserSummary]:
        with console.caller.acting():
            return ops.list_users(
                target.storage, tenant_id=console.caller.tenant_id, contains=q, limit=200
            )

    found = console.state.reading.read(read)
    return console.page("users.html", users=found, q=q)


@router.get("/users/{user_id}")
def memory(
    console: SignedIn, user_id: str, agent: str | None = None, q: str = "", category: str = ""
) -> Response:
    if agent is None:  # the user, not one of their memories: find the one to show
        return _user_page(console, user_id)
    return _memory_page(console, user_id, _agent(agent), q=q, category=category)


def _user_page(console: Console, user_id: str) -> Response:
    """The user's memory when there is one to open (their only agent's, or the only one
    holding facts), else the page listing their agents."""
    caller = console.caller
    with caller.acting():
        found = ops.list_users(console.state.storage, tenant_id=caller.tenant_id, user_id=user_id)
    if not found:
        return console.failure(404, f"no memory of user {user_id!r}", "No such user")
    user = found[0]
    with_facts = [a for a, n in zip(user.agents, user.agent_facts, strict=True) if n]
    if len(user.agents) == 1 or len(with_facts) == 1:
        chosen = user.agents[0] if len(user.agents) == 1 else with_facts[0]
        return redirect(_memory_path(user.user_id, chosen))
    agents = list(zip(user.agents, user.agent_facts, strict=True))
    return console.page("agents.html", user=user, agents=agents)


def _memory_path(user_id: str, agent: str | None) -> str:
    return f"/console/users/{quote(user_id, safe='')}?agent={quote(agent or '', safe='')}"


def _memory_page(
    console: Console,
    user_id: str,
    agent: str | None,
    *,
    q: str = "",
    category: str = "",
    notice: str | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    caller = console.caller
    scope = _scope(console, user_id, agent)
    if isinstance(scope, Response):
        return scope

    def read(target: ReadTarget) -> tuple[MemoryDocument, list[UserSummary], list[Fact]]:
        with caller.acting():
            doc = redacted_document(target.storage.load(**scope.arguments()))
            summary = ops.list_users(target.storage, tenant_id=caller.tenant_id, user_id=user_id)
            facts = list(doc.facts)
            if q.strip():
                found = ops.search_facts(
                    target.storage,
                    q,
                    tenant_id=caller.tenant_id,
                    user_id=scope.user_id,
                    agent_name=scope.agent_key,
                    limit=None,
                )
                facts = [record.fact for record in found]
        return doc, summary, facts

    # Right after a change (a notice or an error to show) the page shows the primary's memory:
    # the replica may not have the change yet.
    if notice is None and error is None:
        doc, summary, facts = console.state.reading.read(read)
    else:
        doc, summary, facts = read(console.state.reading.primary)
    if doc.version == 0 and not summary:
        return console.failure(404, f"no memory of user {user_id!r}", "No such user")
    category = category.strip()
    if category:
        facts = [fact for fact in facts if fact.category == category]
    sections = doc.sections()
    return console.page(
        "memory.html",
        status,
        user_id=scope.user_id,
        agent=scope.agent_name,
        agents=summary[0].agents if summary else (),
        doc=doc,
        facts=sorted(facts, key=lambda f: -f.confidence) if not q.strip() else facts,
        sections=[(name, sections[name]) for name in SECTION_NAMES],
        categories=sorted({fact.category for fact in doc.facts}),
        category=category,
        q=q,
        notice=notice,
        error=error,
    )


@router.post("/users/{user_id}/facts")
def add_fact(
    console: Posted,
    user_id: str,
    content: Annotated[str, Form()],
    version: Annotated[int, Form()],
    category: Annotated[str, Form()] = "context",
    confidence: Annotated[float, Form()] = 0.9,
    agent: Annotated[str, Form()] = "",
) -> Response:
    return _change_fact(
        console,
        user_id,
        agent,
        "added",
        ops.add_fact,
        content,
        category=category,
        confidence=confidence,
        expected_version=version or None,
    )


@router.post("/users/{user_id}/facts/{fact_id}")
def edit_fact(
    console: Posted,
    user_id: str,
    fact_id: str,
    version: Annotated[int, Form()],
    content: Annotated[str, Form()],
    category: Annotated[str, Form()],
    confidence: Annotated[float, Form()],
    agent: Annotated[str, Form()] = "",
) -> Response:
    return _change_fact(
        console,
        user_id,
        agent,
        "saved",
        ops.update_fact,
        fact_id,
        expected_version=version,
        content=content,
        category=category,
        confidence=confidence,
    )


@router.post("/users/{user_id}/facts/{fact_id}/delete")
def delete_fact(
    console: Posted,
    user_id: str,
    fact_id: str,
    version: Annotated[int, Form()],
    agent: Annotated[str, Form()] = "",
) -> Response:
    return _change_fact(
        console, user_id, agent, "deleted", ops.remove_fact, fact_id, expected_version=version
    )


def _change_fact(
    console: Console,
    user_id: str,
    agent: str,
    done: str,
    operation: Callable[..., ops.FactChange],
    *args: Any,
    **fields: Any,
) -> Response:
    """``operation`` (an ``ops`` fact change) on the user's memory of ``agent``, acting for
    the caller; the memory page again, saying what was ``done`` or why not."""
    console.need("write")
    caller = console.caller

    def change() -> ops.FactChange:
        with caller.acting():
            return operation(
                console.state.storage,
                *args,
                user_id=user_id,
                agent_name=_agent(agent),
                tenant_id=caller.tenant_id,
                **fields,
            )

    result, error, status = _attempt(change)
    if result is None:
        return _memory_page(console, user_id, _agent(agent), error=error, status=status)
    notice = f"fact {done}: {result.fact.content} (memory version {result.version})"
    return console.done(_memory_path(user_id, _agent(agent)), notice)


@router.get("/users/{user_id}/facts/{fact_id}/history")
def fact_history(console: SignedIn, user_id: str, fact_id: str, agent: str = "") -> Response:
    caller = console.caller
    scope = _scope(console, user_id, _agent(agent))
    if isinstance(scope, Response):
        return scope

    def read(target: ReadTarget) -> tuple[list[dict[str, Any]], MemoryDocument]:
        with caller.acting():
            events, _ = history.change_log(target.storage, scope, fact_id=fact_id, limit=500)
            return events, redacted_document(target.storage.load(**scope.arguments()))

    events, doc = console.state.reading.read(read)
    if not events:
        return console.failure(404, f"no history of fact {fact_id!r}", "No such fact")
    current = next((fact for fact in doc.facts if fact.id == fact_id), None)
    texts = [(key, label) for key, label in HISTORY_TEXTS if any(key in e for e in events)]
    extra = sorted({key for e in events for key in e} - _EVENT_FIELDS - {k for k, _ in texts})
    return console.page(
        "history.html",
        user_id=scope.user_id,
        agent=scope.agent_name,
        fact_id=fact_id,
        current=current,
        events=events[::-1],  # the change log reads oldest first; the page shows the newest first
        texts=texts,
        extra=extra,
    )


@router.get("/users/{user_id}/memory.json")
def export_memory(console: SignedIn, user_id: str, agent: str = "") -> Response:
    """The memory of ``user_id`` (one agent's) as DeerFlow's memory.json, downloaded."""
    caller = console.caller
    scope = _scope(console, user_id, _agent(agent))
    if isinstance(scope, Response):
        return scope

    def read(target: ReadTarget) -> MemoryDocument:
        with caller.acting():
            return redacted_document(target.storage.load(**scope.arguments()))

    doc = console.state.reading.read(read)
    if doc.version == 0:
        return console.failure(404, f"no memory of user {user_id!r}", "No such user")
    name = f"{scope.user_id}-{scope.agent_name or 'no-agent'}.memory.json"
    return Response(
        json.dumps(doc.to_deerflow(), ensure_ascii=False, indent=2),
        media_type="application/json",
        headers={**HEADERS, "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}"},
    )


@router.post("/users/{user_id}/forget")
def forget(console: Posted, user_id: str, confirm: Annotated[str, Form()] = "") -> Response:
    """Delete everything of ``user_id`` in the tenant (admin; the id typed again)."""

    def apply() -> dict[str, int]:
        console.need("admin")
        if confirm.strip() != user_id:
            raise Refused(400, f"type the user's id ({user_id}) to confirm forgetting them")
        with console.caller.acting():
            return ops.forget_user(
                console.state.storage, user_id, tenant_id=console.caller.tenant_id
            )

    deleted, problem, code = _attempt(apply)
    if deleted is None:
        return _memory_page(console, user_id, None, error=problem, status=code)
    counts = ", ".join(counted(count, table) for table, count in deleted.items())
    return console.done("/console/users", f"forgot {user_id}: deleted {counts}")


# The queue ----------------------------------------------------------------------------------


@router.get("/queue")
def queue(console: SignedIn) -> Response:
    return _queue_page(console)


def _queue_page(
    console: Console, notice: str | None = None, error: str | None = None, status: int = 200
) -> Response:
    caller = console.caller
    with caller.acting():
        counts = manage.count_updates(console.state.engine, tenant_id=caller.tenant_id)
        rows = manage.list_updates(console.state.engine, tenant_id=caller.tenant_id, limit=500)
    updates = [row.to_dict() for row in rows]
    if not console.admin:
        for update in updates:
            update["last_error"] = without_endpoint(update["last_error"], console.state)
    return console.page(
        "queue.html", status, counts=counts, updates=updates, notice=notice, error=error
    )


@router.post("/queue/retry")
def retry(console: Posted, key: Annotated[str, Form()] = "") -> Response:
    return _queue_change(console, key, manage.retry_updates, "requeued")


@router.post("/queue/drop")
def drop(console: Posted, key: Annotated[str, Form()] = "") -> Response:
    return _queue_change(console, key, manage.drop_updates, "dropped")


def _queue_change(
    console: Console, key: str, change: Callable[..., manage.QueueChange], done: str
) -> Response:
    console.need("admin")
    caller = console.caller

    def apply() -> manage.QueueChange:
        keys = None
        if key.strip():
            parsed = manage.UpdateKey.parse(key.strip())
            if parsed.tenant_id != caller.tenant_id:  # as if it did not exist
                raise UpdateNotFoundError(str(parsed))
            keys = [parsed]
        with caller.acting():
            return change(console.state.engine, keys, tenant_id=caller.tenant_id)

    result, error, status = _attempt(apply)
    if result is None:
        return _queue_page(console, None, error, status)
    if result.changed and done == "requeued":
        console.state.service.worker.notify(utcnow())
    notice = f"{done} {counted(len(result.changed), 'updates')}"
    if result.running:
        notice += f"; {len(result.running)} running now, left alone"
    return console.done("/console/queue", notice)


# Reports ------------------------------------------------------------------------------------


@router.get("/reports")
def reports(console: SignedIn, days: Annotated[int, Query(ge=1, le=366)] = 30) -> Response:
    with console.caller.acting():
        report = build_report(console.state.storage, tenant_id=console.caller.tenant_id, days=days)
    day_names = [row["day"] for row in report["activity"]]
    fields = ("calls", "failures", "prompt", "completion")
    usage = {day: dict.fromkeys(fields, 0) for day in day_names}
    for row in report["llm_usage"]:
        entry = usage.get(row["day"])
        if entry is None:
            continue
        entry["calls"] += row["calls"]
        entry["failures"] += row["failures"]
        entry["prompt"] += row["prompt_tokens"]
        entry["completion"] += row["completion_tokens"]

    def per_day(field: str) -> list[float]:
        return [usage[day][field] for day in day_names]

    figures = {
        "categories": charts.bars(
            "Facts by category", [(row["category"], row["facts"]) for row in report["categories"]]
        ),
        "confidence": charts.bars(
            "Facts by confidence", [(row["bucket"], row["facts"]) for row in report["confidence"]]
        ),
        "activity": charts.columns(
            "Fact changes per day",
            day_names,
            [
                (name, [row[name] for row in report["activity"]])
                for name in ("added", "updated", "removed")
            ],
        ),
        "calls": charts.columns(
            "LLM calls per day",
            day_names,
            [
                ("ok", [c - f for c, f in zip(per_day("calls"), per_day("failures"), strict=True)]),
                ("failed", per_day("failures")),
            ],
        ),
        "tokens": charts.columns(
            "LLM tokens per day",
            day_names,
            [("prompt", per_day("prompt")), ("completion", per_day("completion"))],
        ),
    }
    return console.page("reports.html", report=report, figures=figures, days=days)


# Keys ---------------------------------------------------------------------------------------


@router.get("/keys")
def keys(console: SignedIn) -> Response:
    console.need("admin")
    return _keys_page(console)


def _keys_page(
    console: Console,
    *,
    secret: str | None = None,
    notice: str | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    with console.caller.acting():
        found = list_keys(console.state.engine, tenant_id=console.caller.tenant_id)
    found.sort(key=lambda k: (k.revoked_at is not None, k.created_at), reverse=False)
    return console.page(
        "keys.html",
        status,
        keys=found,
        roles=API_KEY_ROLES,
        secret=secret,
        notice=notice,
        error=error,
    )


@router.post("/keys")
def create(
    console: Posted,
    role: Annotated[str, Form()] = "read",
    description: Annotated[str, Form()] = "",
) -> Response:
    console.need("admin")
    caller = console.caller

    def make() -> tuple[ApiKey, str]:
        with caller.acting():
            return create_key(
                console.state.engine,
                tenant_id=caller.tenant_id,
                role=role,
                description=description.strip() or None,
            )

    made, error, status = _attempt(lambda: _key_change(make))
    if made is None:
        return _keys_page(console, error=error, status=status)
    key, secret = made
    return _keys_page(
        console, secret=secret, notice=f"key {key.key_id} ({key.role}) created", status=201
    )


@router.post("/keys/{key_id}/revoke")
def revoke(console: Posted, key_id: str) -> Response:
    console.need("admin")
    caller = console.caller
    engine = console.state.engine
    with caller.acting():
        mine = {k.key_id for k in list_keys(engine, tenant_id=caller.tenant_id)}
        if key_id not in mine:  # another tenant's key is answered as one that does not exist
            return _keys_page(console, error=f"no API key {key_id!r}", status=404)
        _, error, status = _attempt(lambda: _key_change(lambda: revoke_key(engine, key_id)))
    if error is not None:
        return _keys_page(console, error=error, status=status)
    if key_id == caller.key.key_id:  # this session's own key: it ends here
        return redirect("/console/login")
    return _keys_page(console, notice=f"key {key_id} revoked")


INSUFFICIENT_PRIVILEGE = "42501"


def _key_change(change: Callable[[], T]) -> T:
    """``change()`` of the keys table; a database role that may not change it (PostgreSQL, as
    ``memory-sql db grant`` leaves the service's role) is refused by name, 403."""
    try:
        return change()
    except StorageError as exc:
        orig = getattr(exc.__cause__, "orig", None)
        if getattr(orig, "sqlstate", None) != INSUFFICIENT_PRIVILEGE:
            raise
        raise Refused(
            403,
            "the service's database role may not create or revoke API keys (memory-sql db "
            "grant gives it none): run memory-sql keys create or keys revoke as the tables' "
            "owner",
        ) from None


# The request log ------------------------------------------------------------------------------


@router.get("/requests")
def requests(console: SignedIn) -> Response:
    entries = console.request.app.state.request_log.recent(console.caller.tenant_id)
    return console.page("requests.html", entries=entries)
