"""The web console at ``/console``: server-rendered pages (Jinja2 templates and a stylesheet
shipped in this package; no script, nothing fetched from elsewhere) for the people who run the
service. See :mod:`.pages` for what it shows and :mod:`.sessions` for sign-in and CSRF."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from .pages import Console, Refused, SignInNeeded, failure_page, redirect, router, signed_in
from .sessions import Sessions

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Serve the console in ``app``: its pages, its static files, and its sessions."""
    app.state.console_sessions = Sessions()
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")

    @app.exception_handler(SignInNeeded)
    async def _sign_in(_request: Request, _exc: SignInNeeded) -> Response:
        return redirect("/console/login")

    @app.exception_handler(Refused)
    async def _refused(request: Request, exc: Refused) -> Response:
        return failure_page(await _console_of(request), exc.status, exc.message)

    # After the static files' mount: a path no page answers gets the console's own 404.
    @app.api_route("/console/{path:path}", methods=["GET", "POST"], include_in_schema=False)
    async def _no_such_page(request: Request, path: str) -> Response:
        message = f"the console has no page at /console/{path}"
        return failure_page(await _console_of(request), 404, message, "Page not found")

    @app.get("/", include_in_schema=False)
    async def _root() -> Response:
        return redirect("/console")


async def _console_of(request: Request) -> Console | None:
    """The request's signed-in console (for the page's navigation), or None."""
    try:
        return await run_in_threadpool(signed_in, request)
    except SignInNeeded:
        return None


__all__ = ["install"]
