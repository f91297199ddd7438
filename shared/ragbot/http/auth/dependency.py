"""The one FastAPI security dependency: ``require(scope)``, declared as OpenAPI security schemes and put
on routers (never on a route's decorator) by ``include_scoped``.

It sets ``request.state.client_ip`` (the real client after trusted proxies) and
``request.state.principal`` (who the caller is), which the rate limiter keys on and which owns the
conversations it opens (``owner_of``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, FastAPI, Request, Security, params
from fastapi.routing import APIRoute
from fastapi.security import (
    APIKeyHeader,
    APIKeyQuery,
    HTTPAuthorizationCredentials,
    HTTPBasic,
    HTTPBasicCredentials,
    HTTPBearer,
)

from ragbot.errors import Forbidden, Unauthenticated
from ragbot.http.auth.credentials import Authenticator, Principal, forwarded_client
from ragbot.http.auth.revocation import SessionRegistry
from ragbot.http.auth.session import SessionCookies, csrf_ok
from ragbot.settings import (
    AUTH_SCOPES,
    AuthScope,
    AuthSettings,
    RedisSettings,
    get_auth_settings,
    get_redis_settings,
)

logger = logging.getLogger("ragbot.http.auth")

bearer_scheme = HTTPBearer(
    auto_error=False, scheme_name="bearer", description="`Authorization: Bearer <key>`"
)
api_key_scheme = APIKeyHeader(
    name="X-API-Key", auto_error=False, scheme_name="apiKey", description="`X-API-Key: <key>`"
)
basic_scheme = HTTPBasic(
    auto_error=False,
    scheme_name="basic",
    description="HTTP Basic with the key as password (user ignored), e.g. `https://wiki:<key>@host/`",
)
ping_token_scheme = APIKeyQuery(
    name="token",
    auto_error=False,
    scheme_name="pingToken",
    description="a wiki's ping token, `?token=<token>`: accepted on `POST /v1/pages/changed` only",
)
WHAT_TO_SEND = (
    "send an API key as 'Authorization: Bearer <key>', 'X-API-Key: <key>' or HTTP Basic with the key as "
    "password"
)


Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]
ApiKey = Annotated[str | None, Security(api_key_scheme)]
Basic = Annotated[HTTPBasicCredentials | None, Security(basic_scheme)]
PingToken = Annotated[str | None, Security(ping_token_scheme)]


GUEST_REFUSED = (
    "a guest of the open chat page may only open conversations, ask and rate in its own; this route needs "
    "the '{scope}' scope: sign in or "
)


@dataclass(frozen=True, slots=True)
class RouteAuth:
    """What a route needs: a scope, whether a wiki's ping token also opens it, and whether the open chat
    page's guests may use it (their own conversations only)."""

    scope: AuthScope
    ping_token: bool = False
    guest: bool = False


RouteRule = Callable[[APIRoute], RouteAuth | None]


class AuthState:
    """What the dependency reads from ``app.state.auth``: the authenticator and the UI's cookies (bound
    to ``service``), whose signed-in sessions live in the Redis of ``redis``."""

    def __init__(self, settings: AuthSettings, *, service: str, redis: RedisSettings) -> None:
        self.authenticator = Authenticator(settings)
        self.registry = SessionRegistry(redis)
        self.sessions = SessionCookies(settings, service=service, registry=self.registry)

    async def close(self) -> None:
        """Close the session registry's connections."""
        await self.registry.close()


def install_auth(
    app: FastAPI,
    settings: AuthSettings | None = None,
    *,
    service: str = "",
    redis: RedisSettings | None = None,
) -> AuthState:
    """Compile the settings (default: the environment's) into ``app.state.auth``."""
    state = AuthState(
        settings or get_auth_settings(), service=service or app.title, redis=redis or get_redis_settings()
    )
    app.state.auth = state
    return state


def auth_state(request: Request) -> AuthState:
    """The app's compiled auth settings (built on first use when the app factory did not)."""
    state: AuthState | None = getattr(request.app.state, "auth", None)
    if state is None:
        state = install_auth(request.app)
    return state


def client_ip(request: Request, authn: Authenticator) -> str | None:
    """The real client address of ``request`` (``X-Forwarded-For`` only from a trusted proxy)."""
    peer = request.client.host if request.client else None
    return forwarded_client(peer, request.headers.get("x-forwarded-for"), authn.proxies)


def _presented(
    bearer: HTTPAuthorizationCredentials | None, api_key: str | None, basic: HTTPBasicCredentials | None
) -> tuple[str, str] | None:
    if bearer is not None and bearer.credentials:
        return bearer.credentials, "bearer"
    if api_key:
        return api_key, "api_key"
    if basic is not None and basic.password:
        return basic.password, "basic"
    return None


def owner_of(principal: Principal) -> str:
    """Who owns what a caller opens (a conversation): its key's name, ``guest:<id>``, ``network:<ip>``."""
    return principal.name


async def authenticate(
    request: Request,
    *,
    need: RouteAuth,
    bearer: HTTPAuthorizationCredentials | None,
    api_key: str | None,
    basic: HTTPBasicCredentials | None,
    token: str | None,
) -> Principal:
    """The principal for this request if it may use ``need.scope``; else 401 (what to send) or 403."""
    state = auth_state(request)
    authn = state.authenticator
    request.state.client_ip = client_ip(request, authn)
    if not authn.enabled:
        anyone = Principal(name="anonymous", scopes=frozenset(AUTH_SCOPES), method="disabled")
        request.state.principal = anyone
        return anyone
    principal: Principal | None = None
    presented = _presented(bearer, api_key, basic)
    if presented is not None:
        principal = authn.by_key(presented[0], presented[1])  # type: ignore[arg-type]
        # A key that matches nothing counts for nothing: a caller its network lets in without a key
        # still gets in (SDKs such as OpenAI's always send one), any other is told its key is wrong.
        if principal is None and authn.by_network(request.state.client_ip, need.scope) is None:
            raise Unauthenticated(f"the {presented[1]} credential matches no configured key; {WHAT_TO_SEND}")
    elif need.ping_token and token:
        principal = authn.by_ping_token(token)
        if principal is None:
            raise Unauthenticated("the ping token (?token=) matches no configured ping token")
    elif (session := state.sessions.read(request)) is not None:
        principal = await state.sessions.principal(session, authn)
        if principal is not None and not csrf_ok(request, session):
            raise Forbidden("a signed-in page must send its CSRF token in X-CSRF-Token on every write")
        if principal is not None and principal.method == "guest" and not need.guest:
            # A caller its network trusts with the scope keeps it, guest cookie or not.
            principal = authn.by_network(request.state.client_ip, need.scope) or principal
    if principal is None:
        principal = authn.by_network(request.state.client_ip, need.scope)
        if principal is None:
            raise Unauthenticated(f"this route needs the '{need.scope}' scope: {WHAT_TO_SEND}")
    if principal.method == "guest":
        if not need.guest:
            raise Forbidden(GUEST_REFUSED.format(scope=need.scope) + WHAT_TO_SEND)
    elif need.scope not in principal.scopes:
        raise Forbidden(
            f"the key '{principal.name}' lacks the '{need.scope}' scope this route needs; "
            f"use a key with it (it has: {', '.join(sorted(principal.scopes)) or 'none'})"
        )
    request.state.principal = principal
    return principal


def require(scope: AuthScope, *, ping_token: bool = False, guest: bool = False) -> params.Depends:
    """The dependency for routes that need ``scope`` (and, for the ping route, accept a ping token; for
    the chat page's own calls, admit its guests)."""
    need = RouteAuth(scope=scope, ping_token=ping_token, guest=guest)

    if ping_token:

        async def with_token(
            request: Request,
            bearer: Bearer,
            api_key: ApiKey,
            basic: Basic,
            token: PingToken,
        ) -> Principal:
            return await authenticate(
                request, need=need, bearer=bearer, api_key=api_key, basic=basic, token=token
            )

        dep: params.Depends = Security(with_token)
        return dep

    async def with_key(request: Request, bearer: Bearer, api_key: ApiKey, basic: Basic) -> Principal:
        return await authenticate(request, need=need, bearer=bearer, api_key=api_key, basic=basic, token=None)

    plain: params.Depends = Security(with_key)
    return plain


async def authenticate_first(request: Request) -> None:
    """Raise the 401/403 the route's scope would, for a request FastAPI refused before its dependencies
    ran (a body that is not JSON, a missing field): a caller without a credential learns nothing about
    what a route accepts. Does nothing for open routes and for callers who may use the route."""
    need = getattr(request.scope.get("route"), "ragbot_need", None)
    if not isinstance(need, RouteAuth):
        return
    authorization = request.headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    bearer = basic = None
    if scheme.lower() == "bearer" and value.strip():
        bearer = HTTPAuthorizationCredentials(scheme="Bearer", credentials=value.strip())
    elif scheme.lower() == "basic" and value.strip():
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise Unauthenticated(f"the basic credential cannot be read; {WHAT_TO_SEND}") from None
        basic = HTTPBasicCredentials(username=user, password=password)
    await authenticate(
        request,
        need=need,
        bearer=bearer,
        api_key=request.headers.get("x-api-key"),
        basic=basic,
        token=request.query_params.get("token") if need.ping_token else None,
    )


def include_scoped(target: FastAPI | APIRouter, router: APIRouter, rule: RouteRule | AuthScope) -> None:
    """Include ``router``'s routes with the dependency each one's ``rule`` asks for (None: open).

    Routes keep their own decorators' dependencies; the scope is added at inclusion, one sub-router
    per scope, so no route decorator is edited.
    """
    groups: dict[RouteAuth | None, APIRouter] = {}
    for route in router.routes:
        if not isinstance(route, APIRoute):
            # Fail closed: a nested router or a plain route would otherwise be included unguarded.
            raise TypeError(f"include_scoped takes routers of API routes only, not {route!r}")
        need = rule(route) if callable(rule) else RouteAuth(scope=rule)
        route.ragbot_need = need  # type: ignore[attr-defined]  # read by ``authenticate_first``
        groups.setdefault(need, APIRouter()).routes.append(route)
    deps: dict[RouteAuth, params.Depends] = {}
    for need, part in groups.items():
        if need is None:
            target.include_router(part)
            continue
        dep = deps.setdefault(need, require(need.scope, ping_token=need.ping_token, guest=need.guest))
        target.include_router(part, dependencies=[dep])
