"""The web console at ``/console``: server-rendered pages (Jinja2 templates and a stylesheet
shipped in this package; no script, nothing fetched from elsewhere) for the people who run the
service. See :mod:`.pages` for what it shows and :mod:`.sessions` for sign-in and CSRF."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from .pages import Refused, SignInNeeded, redirect, render, router
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
    async def _refused(_request: Request, exc: Refused) -> Response:
        return render("error.html", exc.status, console=None, message=exc.message)

    @app.get("/", include_in_schema=False)
    async def _root() -> Response:
        return redirect("/console")


__all__ = ["install"]
