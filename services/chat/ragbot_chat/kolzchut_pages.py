"""The three pages KZChatbot frames (RAG settings, tester, batch tester), served at the root for the wiki's
``RagUiHandler`` and for operators on the backend itself.

The wiki fetches ``<backend>/admin.html``, ``/index.html`` and ``/batch-runner.html`` server-side with
the backend's key (HTTP Basic in ``$wgKZChatbotLlmApiUrl``, a Bearer or X-API-Key header), injects
``window.KZ_PROXY`` and its fetch shim, and serves the page from its own origin. So each page is one
self-contained document in ``kolzchut_pages/`` (inline CSS and JS, root-relative calls only), outside
the public ``static/`` folder: a browser without the ``admin`` scope gets the sign-in form instead.

The pages are answered with a Content-Security-Policy naming the sha256 of each inline script and
style, so the backend needs no ``'unsafe-inline'`` (the wiki's own CSP applies when it serves them).
A page's ``/* @include name.js */`` is replaced by that file of the web UI's ``static/js`` (its
``export`` keywords dropped), so both UIs share one helper, such as the rule that only http(s) page
URLs become links (``links.js``), while each page stays one self-contained document.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ragbot.errors import Forbidden, Unauthenticated
from ragbot.http.auth import RouteAuth, authenticate
from ragbot.http.auth.dependency import ApiKey, Basic, Bearer
from ragbot_chat import i18n, signin, ui

PAGES_DIR = Path(__file__).parent / "kolzchut_pages"
PAGES = {"/admin.html": "admin.html", "/index.html": "index.html", "/batch-runner.html": "batch-runner.html"}
_INLINE = {kind: re.compile(rf"<{kind}>(.*?)</{kind}>", re.S) for kind in ("script", "style")}
_INCLUDE = re.compile(r"/\* @include ([a-z][a-z0-9-]*\.js) \*/")
_EXPORT = re.compile(r"^export ", re.M)

router = APIRouter(tags=["kolzchut-pages"], include_in_schema=False)


def _hashes(text: str, kind: str) -> str:
    found = _INLINE[kind].findall(text)
    digests = [base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() for body in found]
    return " ".join(f"'sha256-{d}'" for d in digests) or "'none'"


def _included(match: re.Match[str]) -> str:
    source = (ui.STATIC_DIR / "js" / match.group(1)).read_text(encoding="utf-8")
    return _EXPORT.sub("", source)


@cache
def page_text(filename: str) -> str:
    """One page as served: its ``@include`` markers replaced by the shared scripts (read once)."""
    return _INCLUDE.sub(_included, (PAGES_DIR / filename).read_text(encoding="utf-8"))


@cache
def page_headers(filename: str) -> dict[str, str]:
    """The headers of one page: its CSP allows exactly its own inline scripts and styles (read once)."""
    text = page_text(filename)
    csp = (
        f"default-src 'self'; script-src {_hashes(text, 'script')}; style-src {_hashes(text, 'style')}; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'self'"
    )
    return {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


def _page_route(filename: str) -> Callable[..., Any]:
    async def page(
        request: Request, bearer: Bearer, api_key: ApiKey, basic: Basic, ui_settings: signin.UiSettingsDep
    ) -> Response:
        headers = page_headers(filename)
        try:
            need = RouteAuth(scope="admin")
            await authenticate(request, need=need, bearer=bearer, api_key=api_key, basic=basic, token=None)
        except (Unauthenticated, Forbidden) as exc:
            return signin.signin_page(  # styled from /ui/static: the UI's own policy
                scope="admin",
                next_path=request.url.path,
                message=str(exc),
                headers=ui.PAGE_HEADERS,
                lang=i18n.choose_language(request, ui_settings),
            )
        return HTMLResponse(page_text(filename), headers=headers)

    page.__doc__ = f"KZChatbot's framed page {filename} (admin scope; else the sign-in form)."
    return page


for _path, _file in PAGES.items():
    router.add_api_route(_path, _page_route(_file), methods=["GET"], name=f"kolzchut:{_file}")
