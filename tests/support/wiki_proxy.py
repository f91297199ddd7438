"""A stand-in for the wiki's two KZChatbot REST handlers, on its own origin, for the browser tests.

- ``RagUiHandler`` (``GET /w/rest.php/kzchatbot/v0/ragui/<page>``): fetch ``<backend>/<page>``
  server-side, inject ``window.KZ_PROXY = {base, csrf, canEdit, canCleanRedis}``, a ``fetch()`` shim that
  rewrites exactly the listed root-relative paths (optionally with a query string) to the proxy below,
  and the CSS that hides ``.save-btn``, locks ``.main-content`` fields and hides ``.danger-zone`` for
  users without the rights; serve it under the wiki's CSP.
- ``RagProxyHandler`` (``/w/rest.php/kzchatbot/v0/ragproxy/<path>``): check the CSRF token on writes,
  relay to ``<backend>/<path>`` with ``Accept: application/json`` and, for non-GET, the JSON body as
  sent; keep the status; keep only ``application/json`` or ``text/event-stream``; read the whole body
  first; 180 s timeout.
- ``/w/api.php``: the wiki's own API, where the shim sends the batch runner's literal
  ``https://www.kolzchut.org.il/w/he/api.php`` (``action=opensearch`` over the titles it was given).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from support.chat_fakes import serve_app

UI_BASE = "/w/rest.php/kzchatbot/v0/ragui/"
PROXY_BASE = "/w/rest.php/kzchatbot/v0/ragproxy/"
PAGES = frozenset({"admin.html", "index.html", "batch-runner.html"})
PROXIED = (
    "get_config",
    "set_config",
    "clean_redis_history",
    "ping/redis",
    "ping/llm_manager",
    "ping/es_docker",
    "search/stream",
    "search",
    "rating",
)
WRITES = frozenset({"set_config", "clean_redis_history", "search", "search/stream", "rating"})
KEPT_TYPES = ("application/json", "text/event-stream")
TIMEOUT_S = 180.0
WIKI_API = "https://www.kolzchut.org.il/w/he/api.php"
# The extension's CSP for the framed pages, exactly as the issue quotes it.
WIKI_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval' https://unpkg.com "
    "https://cdnjs.cloudflare.com; style-src 'self' 'unsafe-inline' https://cdnjs.cloudflare.com; "
    "font-src 'self' data: https://cdnjs.cloudflare.com; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'self'"
)
SHIM = """(function () {
  var P = window.KZ_PROXY;
  var routes = /^\\/(%(paths)s)(\\?.*)?$/;
  var writes = /^(%(writes)s)$/;
  var wikiApi = %(wiki_api)s;
  var original = window.fetch.bind(window);
  window.fetch = function (input, init) {
    var url = typeof input === "string" ? input : input.url;
    if (url.indexOf(wikiApi) === 0) return original("/w/api.php" + url.slice(wikiApi.length), init);
    var m = url.match(routes);
    if (!m) return original(input, init);
    var options = Object.assign({}, init || {});
    var headers = new Headers(options.headers || {});
    if (writes.test(m[1])) headers.set("X-Csrf-Token", P.csrf);
    options.headers = headers;
    return original(P.base + m[1] + (m[2] || ""), options);
  };
})();"""


@dataclass
class WikiProxy:
    """The running proxy: its origin, and every call it relayed (method, path, status)."""

    url: str
    relayed: list[tuple[str, str, int]] = field(default_factory=list)

    def page(self, name: str) -> str:
        """Where a browser opens one of the backend's pages through the wiki."""
        return f"{self.url}{UI_BASE}{name}"


def injection(*, csrf: str, can_edit: bool, can_clean_redis: bool) -> str:
    """What ``RagUiHandler`` puts before ``</head>``: ``KZ_PROXY``, the fetch shim and the rights' CSS."""
    proxy = {"base": PROXY_BASE, "csrf": csrf, "canEdit": can_edit, "canCleanRedis": can_clean_redis}
    shim = SHIM % {
        "paths": "|".join(re.escape(p).replace("/", "\\/") for p in PROXIED),
        "writes": "|".join(re.escape(p).replace("/", "\\/") for p in WRITES),
        "wiki_api": json.dumps(WIKI_API),
    }
    css = []
    if not can_edit:
        css.append(".save-btn { display: none !important; }")
        css.append(
            ".main-content input, .main-content select, .main-content textarea "
            "{ pointer-events: none; background: #eee; }"
        )
    if not can_clean_redis:
        css.append(".danger-zone { display: none !important; }")
    return (
        f"<script>window.KZ_PROXY = {json.dumps(proxy)};\n{shim}</script>\n<style>{' '.join(css)}</style>\n"
    )


@contextmanager
def wiki_proxy(
    *,
    backend_url: str,
    backend_key: str | None = None,
    can_edit: bool = True,
    can_clean_redis: bool = True,
    titles: Sequence[str] = (),
) -> Iterator[WikiProxy]:
    """Serve the two handlers and ``api.php`` on a free port, relaying to ``backend_url``; the wiki
    authenticates to the backend with HTTP Basic ``wiki:<backend_key>`` when one is given."""
    csrf = secrets.token_urlsafe(16)
    auth = httpx.BasicAuth("wiki", backend_key) if backend_key else None
    state = WikiProxy(url="")
    clients: list[httpx.AsyncClient] = []

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        base = backend_url.rstrip("/")
        async with httpx.AsyncClient(base_url=base, auth=auth, timeout=TIMEOUT_S) as opened:
            clients.append(opened)
            yield

    def backend() -> httpx.AsyncClient:
        return clients[0]

    async def ragui(request: Request) -> Response:
        name = request.path_params["page"]
        if name not in PAGES:
            return HTMLResponse("no such page", status_code=404)
        upstream = await backend().get(f"/{name}")
        if upstream.status_code != 200:
            return HTMLResponse(f"backend answered {upstream.status_code}", status_code=502)
        text = upstream.text
        inject = injection(csrf=csrf, can_edit=can_edit, can_clean_redis=can_clean_redis)
        head_end = text.find("</head>")
        page = text[:head_end] + inject + text[head_end:] if head_end >= 0 else inject + text
        return HTMLResponse(page, headers={"Content-Security-Policy": WIKI_CSP})

    async def ragproxy(request: Request) -> Response:
        path = request.path_params["path"]
        if path not in PROXIED:
            return JSONResponse({"error": f"{path} is not proxied"}, status_code=404)
        if path in WRITES and request.headers.get("X-Csrf-Token") != csrf:
            return JSONResponse({"error": "bad CSRF token"}, status_code=403)
        headers = {"Accept": "application/json"}
        body = None
        if request.method != "GET":
            body = await request.body()
            if body:
                headers["Content-Type"] = "application/json"
        upstream = await backend().request(
            request.method, f"/{path}", params=request.query_params, headers=headers, content=body
        )
        content = await upstream.aread()  # the whole body before answering, as the wiki does
        state.relayed.append((request.method, path, upstream.status_code))
        kind = upstream.headers.get("content-type", "").split(";")[0].strip()
        media = kind if kind in KEPT_TYPES else "application/json"
        return Response(content, status_code=upstream.status_code, media_type=media)

    async def api_php(request: Request) -> Response:
        if request.query_params.get("action") != "opensearch":
            return JSONResponse({"error": {"code": "badvalue"}}, status_code=400)
        term = request.query_params.get("search", "")
        found = [t for t in titles if term and term in t][:10]
        return JSONResponse([term, found, ["" for _ in found], ["" for _ in found]])

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route(f"{UI_BASE}{{page}}", ragui, methods=["GET"]),
            Route(f"{PROXY_BASE}{{path:path}}", ragproxy, methods=["GET", "POST"]),
            Route("/w/api.php", api_php, methods=["GET"]),
        ],
    )
    with serve_app(app) as url:
        state.url = url
        yield state
