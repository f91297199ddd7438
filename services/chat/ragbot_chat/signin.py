"""The web UI's sign-in: pages that need a scope answer a sign-in form until the browser holds a session
cookie for a key with it; the chat page follows ``RAGBOT_AUTH_CHAT_PAGE`` (open: a guest session, which
may only open, ask and rate in its own conversations). Signing out ends the session in Redis at once.
Pages and form are rendered in the reader's language (``ragbot_chat.i18n``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ragbot.errors import Forbidden, Unauthenticated
from ragbot.http.auth import RouteAuth, auth_state, authenticate
from ragbot.settings import AuthScope, UiSettings, get_ui_settings
from ragbot_chat import i18n

STATIC_DIR = Path(__file__).parent / "static"
MAX_FORM_BYTES = 8192
router = APIRouter(tags=["ui"], include_in_schema=False)
UiSettingsDep = Annotated[UiSettings, Depends(get_ui_settings)]


def _safe_next(value: str | None) -> str:
    """Only a path on this site (no ``//host`` or scheme): no open redirect after sign-in."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def signin_page(
    *, scope: AuthScope, next_path: str, message: str, headers: dict[str, str], lang: i18n.UiLanguage
) -> HTMLResponse:
    """The sign-in form (401, so scripts see it is not the page they asked for)."""
    values = {"scope": scope, "next": _safe_next(next_path), "message": message}
    body = i18n.page(STATIC_DIR / "signin.html", lang, values)
    return HTMLResponse(
        body, status_code=401, headers={**headers, "WWW-Authenticate": 'Bearer realm="ragbot"'}
    )


async def page_or_signin(
    request: Request, *, path: Path, scope: AuthScope, headers: dict[str, str], lang: i18n.UiLanguage
) -> Response:
    """The page (in ``lang``) when the browser may use ``scope`` (session cookie or trusted network), else
    the form; the chat page under the ``open`` policy hands out a guest session instead (a guest that
    comes back keeps its own, and so its conversations)."""
    state = auth_state(request)
    page = HTMLResponse(i18n.page(path, lang), headers=headers)
    chat_page = scope == "chat" and state.sessions.guest_allowed
    try:
        need = RouteAuth(scope=scope, guest=chat_page)
        await authenticate(request, need=need, bearer=None, api_key=None, basic=None, token=None)
    except (Unauthenticated, Forbidden) as exc:
        if chat_page:
            await state.sessions.start(request, page, name=None)
            return page
        # No credential: a sentence in the reader's language; a key without the scope: the server's reason.
        message = i18n.catalogue(lang)["signin.needs_key"] if isinstance(exc, Unauthenticated) else str(exc)
        return signin_page(
            scope=scope, next_path=request.url.path, message=message, headers=headers, lang=lang
        )
    return page


@router.post("/ui/signin")
async def signin(request: Request, ui_settings: UiSettingsDep) -> Response:
    """Check the form's key; on success set the session cookies and go back to the page asked for."""
    raw = await request.body()
    form = parse_qs(raw[:MAX_FORM_BYTES].decode("utf-8", "replace"), max_num_fields=4)
    key = (form.get("key") or [""])[0]
    next_path = _safe_next((form.get("next") or ["/"])[0])
    state = auth_state(request)
    principal = state.authenticator.by_key(key, "session") if key else None
    if principal is None:
        lang = i18n.choose_language(request, ui_settings)
        message = i18n.catalogue(lang)["signin.wrong_key"]
        return signin_page(scope="admin", next_path=next_path, message=message, headers={}, lang=lang)
    response = RedirectResponse(next_path, status_code=303)
    await state.sessions.start(request, response, name=principal.name)
    return response


@router.post("/ui/signout")
async def signout(request: Request) -> Response:
    """End the browser's session: in Redis at once (the old cookie opens nothing), and its cookies."""
    response = RedirectResponse("/", status_code=303)
    await auth_state(request).sessions.end(request, response)
    return response
