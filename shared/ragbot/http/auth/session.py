"""The web UI's sign-in: a signed, HttpOnly, SameSite=Strict session cookie naming the key signed in
with (never the key), and a double-submit CSRF token every write must echo in ``X-CSRF-Token``."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from ragbot.http.auth.credentials import Authenticator, Principal
from ragbot.settings import AuthSettings

SESSION_COOKIE = "ragbot_session"
CSRF_COOKIE = "ragbot_csrf"
CSRF_HEADER = "X-CSRF-Token"
GUEST = "ui-guest"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class UiSession:
    """A signed-in browser: the key's name (or the chat page's guest) and its CSRF token."""

    name: str
    csrf: str


class SessionCookies:
    """Signs and reads the UI's cookies with the configured secret (or one drawn per process)."""

    def __init__(self, settings: AuthSettings) -> None:
        secret = settings.session_secret.get_secret_value() if settings.session_secret else None
        self._serializer = URLSafeTimedSerializer(secret or secrets.token_urlsafe(32), salt="ragbot-ui")
        self.ttl_s = settings.session_ttl_s
        self.secure = settings.cookie_secure
        self.guest_allowed = settings.chat_page == "open"

    def read(self, request: Request) -> UiSession | None:
        """The session the request's cookie carries, if it is ours and not expired."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data = self._serializer.loads(raw, max_age=self.ttl_s)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("n", "c")):
            return None
        return UiSession(name=data["n"], csrf=data["c"])

    def principal(self, session: UiSession, authn: Authenticator) -> Principal | None:
        """What the session may do now: its key's current scopes (none once the key is removed)."""
        if session.name == GUEST:
            if not self.guest_allowed:
                return None
            return Principal(name=GUEST, scopes=frozenset({"chat"}), method="session")
        scopes = authn.scopes_of(session.name)
        return Principal(name=session.name, scopes=scopes, method="session") if scopes else None

    def start(self, response: Response, *, name: str) -> UiSession:
        """Set the session and CSRF cookies on ``response`` for the key called ``name``."""
        session = UiSession(name=name, csrf=secrets.token_urlsafe(24))
        signed = self._serializer.dumps({"n": name, "c": session.csrf})
        self._set(response, SESSION_COOKIE, signed, httponly=True)
        # Read by the pages' JavaScript and sent back in X-CSRF-Token: another site can neither read it
        # nor (SameSite=Strict) make the browser send the session cookie.
        self._set(response, CSRF_COOKIE, session.csrf, httponly=False)
        return session

    def _set(self, response: Response, name: str, value: str, *, httponly: bool) -> None:
        response.set_cookie(
            name,
            value,
            max_age=self.ttl_s,
            path="/",
            secure=self.secure,
            httponly=httponly,
            samesite="strict",
        )

    def end(self, response: Response) -> None:
        """Clear both cookies."""
        for name in (SESSION_COOKIE, CSRF_COOKIE):
            response.delete_cookie(name, path="/", secure=self.secure, samesite="strict")


def csrf_ok(request: Request, session: UiSession) -> bool:
    """A safe method, or a write that echoes the session's CSRF token."""
    if request.method in SAFE_METHODS:
        return True
    sent = request.headers.get(CSRF_HEADER, "")
    return bool(sent) and hmac.compare_digest(sent.encode(), session.csrf.encode())
