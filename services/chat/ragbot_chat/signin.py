"""The web UI's sign-in: pages that need a scope answer a sign-in form until the browser holds a session
cookie for a key with it; the chat page follows ``RAGBOT_AUTH_CHAT_PAGE`` (open: a guest session)."""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from ragbot.errors import Forbidden, Unauthenticated
from ragbot.http.auth import GUEST, RouteAuth, auth_state, authenticate
from ragbot.settings import AuthScope

STATIC_DIR = Path(__file__).parent / "static"
MAX_FORM_BYTES = 8192
router = APIRouter(tags=["ui"], include_in_schema=False)


def _safe_next(value: str | None) -> str:
    """Only a path on this site (no ``//host`` or scheme): no open redirect after sign-in."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def signin_page(*, scope: AuthScope, next_path: str, message: str, headers: dict[str, str]) -> HTMLResponse:
    """The sign-in form (401, so scripts see it is not the page they asked for)."""
    text = (STATIC_DIR / "signin.html").read_text(encoding="utf-8")
    body = text.format(
        scope=html.escape(scope), next=html.escape(_safe_next(next_path)), message=html.escape(message)
    )
    return HTMLResponse(
        body, status_code=401, headers={**headers, "WWW-Authenticate": 'Bearer realm="ragbot"'}
    )


def page_or_signin(request: Request, *, path: Path, scope: AuthScope, headers: dict[str, str]) -> Response:
    """The page when the browser may use ``scope`` (session cookie or trusted network), else the form;
    the chat page under the ``open`` policy hands out a guest session instead."""
    state = auth_state(request)
    try:
        authenticate(request, need=RouteAuth(scope=scope), bearer=None, api_key=None, basic=None, token=None)
    except (Unauthenticated, Forbidden) as exc:
        if scope == "chat" and state.sessions.guest_allowed:
            response = FileResponse(path, media_type="text/html", headers=headers)
            state.sessions.start(response, name=GUEST)
            return response
        return signin_page(scope=scope, next_path=request.url.path, message=str(exc), headers=headers)
    return FileResponse(path, media_type="text/html", headers=headers)


@router.post("/ui/signin")
async def signin(request: Request) -> Response:
    """Check the form's key; on success set the session cookies and go back to the page asked for."""
    raw = await request.body()
    form = parse_qs(raw[:MAX_FORM_BYTES].decode("utf-8", "replace"), max_num_fields=4)
    key = (form.get("key") or [""])[0]
    next_path = _safe_next((form.get("next") or ["/"])[0])
    state = auth_state(request)
    principal = state.authenticator.by_key(key, "session") if key else None
    if principal is None:
        return signin_page(
            scope="admin", next_path=next_path, message="that key matches no configured key", headers={}
        )
    response = RedirectResponse(next_path, status_code=303)
    state.sessions.start(response, name=principal.name)
    return response


@router.post("/ui/signout")
async def signout(request: Request) -> Response:
    """Forget the browser's session."""
    response = RedirectResponse("/", status_code=303)
    auth_state(request).sessions.end(response)
    return response
