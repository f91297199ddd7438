"""The web UI: the chat, documents and admin pages as static files, and same-origin proxies to ingest
and the retriever.

The pages are chat ``/``, documents ``/documents`` and admin ``/admin``; the proxies let the browser
talk only to chat.

The pages are plain HTML, JavaScript modules and CSS under ``static/`` (no build step, nothing from a
CDN), rendered in the reader's language (Hebrew or English: ``ragbot_chat.i18n``); ``?lang=he|en``
remembers a reader's choice in a cookie and comes back to the page without it. The chat page uses the
own API (``/v1/sessions``...) and the admin page the Kol-Zchut
``/get_config`` / ``/set_config`` routes directly; documents and retrieval debug go through
``/ui/api/ingest/...`` and ``/ui/api/retrieve``, which forward an allow-listed set of calls with httpx
(uploads streamed through, not buffered: the ingest service enforces its own caps).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from ragbot.errors import DependencyUnavailable, NotFound
from ragbot.http.auth import include_scoped
from ragbot.http.limits import RATE_LIMITED
from ragbot.observability.logging import get_request_id
from ragbot.settings import AuthScope
from ragbot_chat import i18n, signin
from ragbot_chat.deps import Resources, ResourcesDep
from ragbot_chat.signin import UiSettingsDep

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PREFIX = "/ui/static"
PAGES = {"/": "index.html", "/documents": "documents.html", "/admin": "admin.html"}
# The scope each page needs (the chat page's also depends on RAGBOT_AUTH_CHAT_PAGE: ragbot_chat.signin).
PAGE_SCOPES: dict[str, AuthScope] = {"/": "chat", "/documents": "admin", "/admin": "admin"}
# The pages render LLM output and uploaded titles: scripts, styles and calls stay on this origin.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_JOB = r"[A-Za-z0-9._:-]{1,200}"
# What the documents and admin pages may ask of ingest: (method, path below /ui/api/ingest/).
INGEST_ROUTES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("POST", re.compile(r"v1/documents")),
    ("GET", re.compile(r"v1/pages")),
    ("GET", re.compile(r"v1/pages/\d{1,12}")),
    ("GET", re.compile(r"v1/jobs")),
    ("GET", re.compile(rf"v1/jobs/{_JOB}")),
    ("POST", re.compile(rf"v1/jobs/{_JOB}/retry")),
)
# Request headers passed on; everything else (cookies, auth, hop-by-hop) stays here.
_FORWARD_HEADERS = ("content-type", "content-length", "accept")

router = APIRouter(tags=["ui"], include_in_schema=False)
# The proxies relay ingest's and the retriever's answers, their rate limits' 429 included.
api_router = APIRouter(prefix="/ui/api", tags=["ui"], responses=RATE_LIMITED)


class UiProxy:
    """One pooled httpx client for the UI's calls to ingest and the retriever, closed with the app."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._client = httpx.AsyncClient(transport=transport, follow_redirects=False)

    async def forward(
        self,
        *,
        method: str,
        url: str,
        dependency: str,
        timeout_s: float,
        headers: dict[str, str],
        params: httpx.QueryParams | None = None,
        content: AsyncIterator[bytes] | bytes | None = None,
    ) -> Response:
        """Send one request upstream; its status, body and content type come back as they are."""
        try:
            upstream = await self._client.request(
                method, url, headers=headers, params=params, content=content, timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            raise DependencyUnavailable(
                f"the {dependency} service at {url} did not answer: {exc!r}", dependency=dependency
            ) from None
        return Response(
            content=upstream.content,
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type", "application/json"),
        )

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()


def get_proxy(request: Request) -> UiProxy:
    """The app's proxy (503 until the lifespan opened it)."""
    proxy: UiProxy | None = getattr(request.app.state, "ui_proxy", None)
    if proxy is None:
        raise DependencyUnavailable("the chat service is still starting", dependency="chat")
    return proxy


ProxyDep = Annotated[UiProxy, Depends(get_proxy)]


def switch_language(request: Request, lang: i18n.UiLanguage) -> Response:
    """Remember the reader's language (a year, this site only) and show the page again without ``?lang``."""
    response = RedirectResponse(request.url.path, status_code=303)
    response.set_cookie(
        i18n.COOKIE, lang, max_age=i18n.COOKIE_MAX_AGE_S, path="/", samesite="lax", httponly=True
    )
    return response


def _page_route(filename: str, scope: AuthScope) -> Callable[..., Any]:
    async def page(request: Request, ui_settings: UiSettingsDep) -> Response:
        chosen = i18n.supported(request.query_params.get("lang"))
        if chosen is not None:
            return switch_language(request, chosen)
        lang = i18n.choose_language(request, ui_settings)
        headers = {**PAGE_HEADERS, "Vary": "Accept-Language, Cookie"}  # a cache keeps each language apart
        path = STATIC_DIR / filename
        return await signin.page_or_signin(request, path=path, scope=scope, headers=headers, lang=lang)

    page.__doc__ = f"The web UI page {filename} (or the sign-in form)."
    return page


for _path, _file in PAGES.items():
    router.add_api_route(_path, _page_route(_file, PAGE_SCOPES[_path]), methods=["GET"], name=f"ui:{_file}")


def forwarded_headers(request: Request, res: Resources | None = None) -> dict[str, str]:
    """The request headers ingest and the retriever need, our request id for their logs, and chat's own
    key (``RAGBOT_CHAT_SERVICE_KEY``) when one is set: the browser's credentials never travel on."""
    headers = {k: v for k in _FORWARD_HEADERS if (v := request.headers.get(k)) is not None}
    rid = get_request_id()
    if rid:
        headers["X-Request-ID"] = rid
    if res is not None and res.settings.service_key is not None:
        headers["Authorization"] = f"Bearer {res.settings.service_key.get_secret_value()}"
    return headers


def ingest_allowed(method: str, path: str) -> bool:
    """True when the UI may make this call to ingest."""
    return any(m == method and pattern.fullmatch(path) for m, pattern in INGEST_ROUTES)


@api_router.get("/ingest/{path:path}", operation_id="get_ingest_proxy")
@api_router.post("/ingest/{path:path}", operation_id="post_ingest_proxy")
async def ingest_proxy(path: str, request: Request, res: ResourcesDep, proxy: ProxyDep) -> Response:
    """Uploads, jobs, retries and the page list, forwarded to the ingest service."""
    if not ingest_allowed(request.method, path):
        raise NotFound(f"the web UI does not forward {request.method} /{path} to ingest")
    body = request.stream() if request.method == "POST" else None
    return await proxy.forward(
        method=request.method,
        url=f"{res.settings.ingest_url.rstrip('/')}/{path}",
        dependency="ingest",
        timeout_s=res.settings.ingest_timeout_s,
        headers=forwarded_headers(request, res),
        params=httpx.QueryParams(str(request.query_params)),
        content=body,
    )


async def to_retriever(request: Request, res: Resources, proxy: UiProxy, *, path: str) -> Response:
    """The request's method and body, forwarded to the retriever's ``path``."""
    return await proxy.forward(
        method=request.method,
        url=f"{res.settings.retriever_url.rstrip('/')}/{path}",
        dependency="retriever",
        timeout_s=res.settings.retriever_timeout_s,
        headers=forwarded_headers(request, res),
        content=await request.body() if request.method == "POST" else None,
    )


@api_router.post("/retrieve")
async def retrieve_proxy(request: Request, res: ResourcesDep, proxy: ProxyDep) -> Response:
    """The retriever's ``POST /v1/retrieve`` (documents, per-stage debug and timings) for the admin page."""
    return await to_retriever(request, res, proxy, path="v1/retrieve")


@api_router.get("/models")
async def models_proxy(request: Request, res: ResourcesDep, proxy: ProxyDep) -> Response:
    """The retriever's dense models, for the admin page's index state."""
    return await to_retriever(request, res, proxy, path="v1/models")


def install_ui(app: FastAPI) -> None:
    """Serve the pages and their static files, and open the proxy's client for the app's lifetime.

    Tests put an ``httpx`` transport in ``app.state.ui_transport`` before the app starts.
    """
    app.include_router(router)
    app.include_router(signin.router)
    include_scoped(app, api_router, "admin")
    app.mount(STATIC_PREFIX, StaticFiles(directory=STATIC_DIR), name="ui-static")
    inner: Callable[[Any], AbstractAsyncContextManager[Any]] = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(scope_app: Any) -> AsyncIterator[Any]:
        proxy = UiProxy(transport=getattr(app.state, "ui_transport", None))
        app.state.ui_proxy = proxy
        try:
            async with inner(scope_app) as state:
                yield state
        finally:
            app.state.ui_proxy = None
            await proxy.close()

    app.router.lifespan_context = lifespan
