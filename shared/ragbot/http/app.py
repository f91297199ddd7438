"""What every HTTP service's app factory shares: the lifespan that holds resources, readiness, routers.

A service passes a ``resources`` factory (its composition root, or a test's fakes) and readiness
checks that read those resources; ``app.state.resources`` holds them while the app runs and the
services' FastAPI dependencies read them back with ``app_resources``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

from fastapi import APIRouter, FastAPI, Request

from ragbot.errors import DependencyUnavailable
from ragbot.http.auth import RouteRule, include_scoped, install_auth, require
from ragbot.observability.http import ReadinessCheck, setup_observability
from ragbot.settings import AuthScope, AuthSettings

R = TypeVar("R")


def create_service_app(
    *,
    service: str,
    resources: Callable[[], AbstractAsyncContextManager[R]],
    checks: Mapping[str, Callable[[R], Awaitable[bool]]],
    routers: Sequence[APIRouter],
    route_auth: RouteRule | AuthScope,
    auth: AuthSettings | None = None,
) -> FastAPI:
    """A FastAPI app titled ``ragbot <service>`` whose lifespan holds the resources; checks see them.

    Every router's routes get the scope ``route_auth`` gives them (``ragbot.http.auth``); ``/metrics``
    needs ``metrics``; ``/healthz`` and ``/readyz`` stay open. ``auth`` replaces the environment's.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with resources() as res:
            app.state.resources = res
            yield
            app.state.resources = None

    app = FastAPI(title=f"ragbot {service}", version="1", lifespan=lifespan)

    def bound(check: Callable[[R], Awaitable[bool]]) -> ReadinessCheck:
        async def ready() -> bool:
            res: R | None = getattr(app.state, "resources", None)
            return res is not None and await check(res)

        return ready

    install_auth(app, auth)
    setup_observability(
        app,
        service=service,
        checks={name: bound(check) for name, check in checks.items()},
        metrics_dependencies=[require("metrics")],
    )
    for router in routers:
        include_scoped(app, router, route_auth)
    return app


def app_resources(request: Request, kind: type[R], *, starting: str, dependency: str) -> R:
    """The resources the lifespan built (503 naming ``starting`` while there are none yet)."""
    resources: R | None = getattr(request.app.state, "resources", None)
    if resources is None:
        raise DependencyUnavailable(f"{starting} is still starting", dependency=dependency)
    return resources
