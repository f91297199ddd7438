"""The web UI's sign-in: a signed, HttpOnly, SameSite=Strict session cookie and a double-submit CSRF token
every write must echo in ``X-CSRF-Token``.

A cookie is bound to the service and port that issued it (its *audience*, checked on every read, and
part of the signing salt), so chat's cookie opens nothing on ingest, nor on another chat on another
port of the same host. A signed-in session (a key's) names a session id that must still be in Redis
(``ragbot.http.auth.revocation``): signing out or ``ragbot auth end-sessions`` ends it at once. A
guest of the open chat page holds a session of its own (a random guest id, no key, no Redis entry:
it can only ask and rate in its own conversations, so there is nothing to revoke).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from ragbot.http.auth.credentials import Authenticator, Principal
from ragbot.http.auth.revocation import SessionRegistry
from ragbot.settings import AuthSettings

SESSION_COOKIE = "ragbot_session"
CSRF_COOKIE = "ragbot_csrf"
CSRF_HEADER = "X-CSRF-Token"
GUEST = "guest"
"""The prefix of a guest's principal name (``guest:<id>``)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class UiSession:
    """A browser's session: its id, the key's name (None for a guest) and its CSRF token."""

    session_id: str
    name: str | None
    csrf: str

    @property
    def guest(self) -> bool:
        """True for the open chat page's guest."""
        return self.name is None


def audience(request: Request, service: str) -> str:
    """Who a cookie is for: the service and the port its socket listens on (never the Host header)."""
    server = request.scope.get("server")
    port = server[1] if server and len(server) > 1 and server[1] is not None else 0
    return f"{service}:{port}"


def guest_name(session_id: str) -> str:
    """A guest's principal name (what owns its conversations): a hash of its session id, not the id."""
    return f"{GUEST}:{hashlib.sha256(session_id.encode()).hexdigest()[:24]}"


class SessionCookies:
    """Signs and reads the UI's cookies with the configured secret (or one drawn per process)."""

    def __init__(self, settings: AuthSettings, *, service: str, registry: SessionRegistry) -> None:
        secret = settings.session_secret.get_secret_value() if settings.session_secret else None
        self.service = service
        self._serializer = URLSafeTimedSerializer(
            secret or secrets.token_urlsafe(32), salt=f"ragbot-ui:{service}"
        )
        self.ttl_s = settings.session_ttl_s
        self.secure = settings.cookie_secure
        self.guest_allowed = settings.chat_page == "open"
        self.registry = registry

    def read(self, request: Request) -> UiSession | None:
        """The session the request's cookie carries, if it is ours (this service and port), not expired."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data = self._serializer.loads(raw, max_age=self.ttl_s)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("s", "c", "a")):
            return None
        if not hmac.compare_digest(data["a"], audience(request, self.service)):
            return None
        name = data.get("n")
        return UiSession(session_id=data["s"], name=name if isinstance(name, str) else None, csrf=data["c"])

    async def principal(self, session: UiSession, authn: Authenticator) -> Principal | None:
        """What the session may do now: a guest's narrow rights, or its key's current scopes when the
        session is still live in Redis (none once signed out, ended, or the key removed)."""
        if session.name is None:
            if not self.guest_allowed:
                return None
            return Principal(name=guest_name(session.session_id), scopes=frozenset(), method="guest")
        scopes = authn.scopes_of(session.name)
        if not scopes or not await self.registry.live(session.session_id, name=session.name):
            return None
        return Principal(name=session.name, scopes=scopes, method="session")

    async def start(self, request: Request, response: Response, *, name: str | None) -> UiSession:
        """Set the session and CSRF cookies on ``response``: for the key called ``name`` (recorded in
        Redis so it can be ended), or a new guest when ``name`` is None."""
        session = UiSession(session_id=secrets.token_urlsafe(24), name=name, csrf=secrets.token_urlsafe(24))
        if name is not None:
            await self.registry.add(session.session_id, name=name, ttl_s=self.ttl_s)
        payload: dict[str, str] = {
            "s": session.session_id,
            "c": session.csrf,
            "a": audience(request, self.service),
        }
        if name is not None:
            payload["n"] = name
        self._set(response, SESSION_COOKIE, self._serializer.dumps(payload), httponly=True)
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

    async def end(self, request: Request, response: Response) -> None:
        """End the request's session in Redis (its cookie is worthless from now on) and clear both cookies."""
        session = self.read(request)
        if session is not None and session.name is not None:
            await self.registry.remove(session.session_id, name=session.name)
        for name in (SESSION_COOKIE, CSRF_COOKIE):
            response.delete_cookie(name, path="/", secure=self.secure, samesite="strict")


def csrf_ok(request: Request, session: UiSession) -> bool:
    """A safe method, or a write that echoes the session's CSRF token."""
    if request.method in SAFE_METHODS:
        return True
    sent = request.headers.get(CSRF_HEADER, "")
    return bool(sent) and hmac.compare_digest(sent.encode(), session.csrf.encode())
