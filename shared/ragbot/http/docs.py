"""The API docs pages, ``/docs`` (Swagger UI) and ``/redoc``, served with vendored assets: no CDN.

The assets (``docs_assets/``, versions in its README) are served by the service itself under
``/docs-assets/``; the pages name them root-relative, after the app's ``root_path`` when it has one.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(__file__).with_name("docs_assets")
ASSET_PATH = "/docs-assets"


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets from this process (open, as FastAPI's are)."""
    app.mount(ASSET_PATH, StaticFiles(directory=ASSETS), name="docs-assets")

    def base(request: Request) -> str:
        return str(request.scope.get("root_path") or "").rstrip("/")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = base(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API",
            swagger_js_url=f"{root}{ASSET_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSET_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSET_PATH}/favicon-32x32.png",
            oauth2_redirect_url=None,
            swagger_ui_parameters={"validatorUrl": None},  # its default badge calls validator.swagger.io
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = base(request)
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API",
            redoc_js_url=f"{root}{ASSET_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSET_PATH}/favicon-32x32.png",
            with_google_fonts=False,
        )
