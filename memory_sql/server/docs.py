"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) that work without a network: their scripts,
styles and icon come from this process, at ``/docs/assets/…``, from the files the
``fastapi-offline`` package ships (Swagger UI, Apache-2.0; ReDoc, MIT), never from a CDN;
ReDoc without Google Fonts. Paths honour the ASGI ``root_path`` (a service behind a prefix).
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
DOCS = "/docs"
REDOC = "/redoc"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def install(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets on ``app`` (made with ``docs_url=None``
    and ``redoc_url=None``)."""
    bundle = resources.files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(bundle)), name="docs-assets")
    openapi = app.openapi_url or "/openapi.json"

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + openapi,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=root + OAUTH2_REDIRECT,
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            # no badge that sends the API's description to the public validator
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
