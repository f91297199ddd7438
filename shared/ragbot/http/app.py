"""What every HTTP service's app factory shares: the lifespan that holds resources, readiness, routers.

A service passes a ``resources`` factory (its composition root, or a test's fakes) and readiness
checks that read those resources (and every JSON body is checked first, ``ragbot.http.json_guard``);
``app.state.resources`` holds them while the app runs and the services' FastAPI dependencies read them
back with ``app_resources``. The lifespan also holds the rate limiter (``app.state.rate_limiter``,
built from settings unless a test set one before start), and enters a service's extra ``lifespans``
(the chat service's MCP session manager) once the resources are up.

Every service's OpenAPI is built the same way: its version is the installed package's
(``ragbot-<service>``), and operation ids are the route functions' names (``operation_id``), which a
generated client turns into method names; ``tests/unit/test_openapi.py`` keeps them unique.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from ragbot.errors import DependencyUnavailable, RagbotError
from ragbot.http.auth import RouteRule, authenticate_first, include_scoped, install_auth, require
from ragbot.http.docs import install_docs
from ragbot.http.head_guard import HeadGuardMiddleware, trusted_hosts
from ragbot.http.json_guard import JsonGuardMiddleware
from ragbot.http.limits import RateLimiter
from ragbot.http.responses import document_error_responses
from ragbot.observability.http import ReadinessCheck, setup_observability
from ragbot.observability.tracing import instrument_app
from ragbot.settings import (
    AuthScope,
    AuthSettings,
    HttpSettings,
    get_http_settings,
    get_rate_limit_settings,
    get_redis_settings,
)

R = TypeVar("R")
AppLifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def package_version(service: str) -> str:
    """The installed version of ``ragbot-<service>`` (of the ``ragbot`` library when that is absent)."""
    for name in (f"ragbot-{service}", "ragbot"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "0+unknown"


def operation_id(route: APIRoute) -> str:
    """A route's operation id: its function's name (``retrieve``, ``post_message``), as clients call it."""
    return route.name


def create_service_app(
    *,
    service: str,
    resources: Callable[[], AbstractAsyncContextManager[R]],
    checks: Mapping[str, Callable[[R], Awaitable[bool]]],
    routers: Sequence[APIRouter],
    route_auth: RouteRule | AuthScope,
    auth: AuthSettings | None = None,
    json_exempt_prefixes: Sequence[str] = (),
    lifespans: Sequence[AppLifespan] = (),
    http: HttpSettings | None = None,
) -> FastAPI:
    """A FastAPI app titled ``ragbot <service>`` whose lifespan holds the resources; checks see them.

    Every router's routes get the scope ``route_auth`` gives them (``ragbot.http.auth``); ``/metrics``
    needs ``metrics``; ``/healthz`` and ``/readyz`` stay open. ``auth`` replaces the environment's, and
    ``http`` (header count, trusted hosts: ``ragbot.http.head_guard``) too.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned: RateLimiter | None = None
        if getattr(app.state, "rate_limiter", None) is None:
            owned = RateLimiter.from_settings(settings=get_rate_limit_settings(), redis=get_redis_settings())
            app.state.rate_limiter = owned
        try:
            async with resources() as res, AsyncExitStack() as extras:
                for extra in lifespans:
                    await extras.enter_async_context(extra(app))
                app.state.resources = res
                yield
                app.state.resources = None
        finally:
            if owned is not None:
                app.state.rate_limiter = None
                await owned.close()
            await app.state.auth.close()

    app = FastAPI(
        title=f"ragbot {service}",
        version=package_version(service),
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        docs_url=None,  # served by install_docs from vendored assets, not a CDN
        redoc_url=None,
    )

    def bound(check: Callable[[R], Awaitable[bool]]) -> ReadinessCheck:
        async def ready() -> bool:
            res: R | None = getattr(app.state, "resources", None)
            return res is not None and await check(res)

        return ready

    # Inside the observability middleware, so its refusals are counted and carry a request id.
    app.add_middleware(
        JsonGuardMiddleware, exempt_prefixes=json_exempt_prefixes, credentials_first=_refusal_before_body
    )
    head = http or get_http_settings()
    app.state.public_base = head.base_url  # absolute URLs in answers start here (``public_url``)
    app.add_middleware(
        HeadGuardMiddleware,
        max_headers=head.max_headers,
        max_header_bytes=head.max_header_bytes,
        hosts=trusted_hosts(public_url=head.public_url, extra=head.trusted_hosts),
    )
    install_auth(app, auth, service=service)
    setup_observability(
        app,
        service=service,
        checks={name: bound(check) for name, check in checks.items()},
        metrics_dependencies=[require("metrics")],
    )
    for router in routers:
        include_scoped(app, router, route_auth)
    app.add_exception_handler(RequestValidationError, _validation_after_auth)
    document_error_responses(app)
    install_docs(app)
    instrument_app(app)  # outermost, so a span covers the whole exchange (a no-op with tracing off)
    return app


def _route_for(routes: Iterable[BaseRoute], scope: Scope) -> Scope | None:
    """The child scope (with ``route``) of the route that fully matches ``scope``, included routers
    searched too."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            found = _route_for(inner.routes, scope)
            if found is not None:
                return found
            continue
        match, child = route.matches(scope)
        if match is Match.FULL:
            return child
    return None


async def _refusal_before_body(scope: Scope) -> Response | None:
    """The 401/403 the matching route would answer this caller, before its body is judged (the JSON
    guard); None when the caller may use the route or no route matches."""
    app = scope.get("app")
    child = _route_for(getattr(getattr(app, "router", None), "routes", []), scope)
    if child is None:
        return None
    request = Request({**scope, **child})
    try:
        await authenticate_first(request)
    except RagbotError as refused:
        handler = request.app.exception_handlers[RagbotError]
        answer: Response = await handler(request, refused)
        return answer
    return None


async def _validation_after_auth(request: Request, exc: Exception) -> Response:
    """FastAPI's 422 for a body or parameter it refused, but only to a caller who may use the route:
    anyone else gets the 401/403 its credentials earn (``authenticate_first``)."""
    try:
        await authenticate_first(request)
    except RagbotError as refused:
        handler = request.app.exception_handlers[RagbotError]
        answer: Response = await handler(request, refused)
        return answer
    assert isinstance(exc, RequestValidationError)
    return await request_validation_exception_handler(request, exc)


def app_resources(request: Request, kind: type[R], *, starting: str, dependency: str) -> R:
    """The resources the lifespan built (503 naming ``starting`` while there are none yet)."""
    resources: R | None = getattr(request.app.state, "resources", None)
    if resources is None:
        raise DependencyUnavailable(f"{starting} is still starting", dependency=dependency)
    return resources


def public_url(request: Request, name: str, **params: str) -> str:
    """The URL of the route called ``name``: ``RAGBOT_HTTP_PUBLIC_URL`` + its path, or the path alone when
    no public URL is configured; never built from the request's ``Host``."""
    base: str = getattr(request.app.state, "public_base", "")
    return f"{base}{request.app.url_path_for(name, **params)}"
