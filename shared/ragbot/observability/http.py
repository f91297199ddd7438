"""FastAPI glue every HTTP service shares: request ids, request metrics, health routes, error mapping.

Metrics are labelled with the route *template* (``/v1/jobs/{job_id}``), never the raw path, so a
scan of random URLs cannot blow up label cardinality; unmatched paths share one label.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, params
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragbot.errors import (
    ConfigurationError,
    DependencyUnavailable,
    Forbidden,
    LLMBusy,
    NotFound,
    RagbotError,
    RateLimited,
    SourceRefused,
    Unauthenticated,
    ValidationFailed,
)
from ragbot.observability.logging import (
    REQUEST_ID_HEADER,
    clean_request_id,
    new_request_id,
    reset_request_id,
    set_request_id,
)
from ragbot.observability.metrics import HttpMetrics, http_metrics, render, scrape_registry

logger = logging.getLogger("ragbot.http")
access_logger = logging.getLogger("ragbot.http.access")

UNMATCHED_ROUTE = "<unmatched>"
QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
ReadinessCheck = Callable[[], Awaitable[bool]]


def route_template(scope: Scope) -> str:
    """The matched route's template, or one shared label for paths no route matched."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return f"{scope.get('root_path', '')}{path}" if isinstance(path, str) else UNMATCHED_ROUTE


class ObservabilityMiddleware:
    """Binds a request id, echoes it in ``X-Request-ID``, counts and times requests, logs one line."""

    def __init__(self, app: ASGIApp, *, service: str, metrics: HttpMetrics | None = None) -> None:
        self.app = app
        self.service = service
        self.metrics = metrics or http_metrics()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap one HTTP exchange; other scope types pass through."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        rid = clean_request_id(incoming) or new_request_id()
        token = set_request_id(rid)
        status = 500
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, rid)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            route = route_template(scope)
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(self.service, route, method, str(status)).inc()
            self.metrics.duration.labels(self.service, route).observe(elapsed)
            access_logger.log(
                logging.DEBUG if route in QUIET_ROUTES and status < 400 else logging.INFO,
                "%s %s %s",
                method,
                route,
                status,
                extra={
                    "method": method,
                    "route": route,
                    "path": scope.get("path"),
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                },
            )
            reset_request_id(token)


def add_health_routes(
    app: FastAPI,
    *,
    service: str,
    checks: Mapping[str, ReadinessCheck] | None = None,
    timeout_s: float = 2.0,
    metrics_dependencies: Sequence[params.Depends] = (),
) -> None:
    """Add ``/healthz`` (alive), ``/readyz`` (every dependency answers) and ``/metrics`` (guarded by
    ``metrics_dependencies``: the services pass the ``metrics`` scope; each scrape also sets
    ``ragbot_dependency_up`` from the same checks)."""
    named_checks = dict(checks or {})

    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": service}

    async def readyz() -> JSONResponse:
        results = await run_checks(named_checks, timeout_s=timeout_s)
        ready = all(results.values())
        return JSONResponse({"ready": ready, "checks": results}, status_code=200 if ready else 503)

    async def metrics() -> Response:
        # Each scrape runs the readiness checks, so an alert sees a store or Redis that stopped answering.
        up = http_metrics().dependency_up
        for name, ok in (await run_checks(named_checks, timeout_s=timeout_s)).items():
            up.labels(service, name).set(1.0 if ok else 0.0)
        body, content_type = render(scrape_registry())
        return Response(body, media_type=content_type)

    app.add_api_route("/healthz", healthz, methods=["GET"], include_in_schema=False)
    app.add_api_route("/readyz", readyz, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        "/metrics", metrics, methods=["GET"], include_in_schema=False, dependencies=list(metrics_dependencies)
    )


async def run_checks(checks: Mapping[str, ReadinessCheck], *, timeout_s: float) -> dict[str, bool]:
    """Run readiness checks concurrently; an error or a timeout counts as not ready."""

    async def one(name: str, check: ReadinessCheck) -> bool:
        try:
            return bool(await asyncio.wait_for(check(), timeout=timeout_s))
        except Exception as exc:  # a readiness probe reports, it never raises
            logger.warning("readiness check failed", extra={"check": name, "error": repr(exc)})
            return False

    names = list(checks)
    outcomes = await asyncio.gather(*(one(n, checks[n]) for n in names))
    return dict(zip(names, outcomes, strict=True))


def _error_body(exc: RagbotError) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, ValidationFailed):
        loc = ["body", exc.field] if exc.field else ["body"]
        return 422, {"detail": [{"loc": loc, "msg": str(exc), "type": "value_error"}]}
    if isinstance(exc, NotFound):
        return 404, {"detail": str(exc)}
    if isinstance(exc, RateLimited):
        return 429, {"detail": str(exc), "limit": exc.limit, "retry_after_s": exc.retry_after_s}
    if isinstance(exc, LLMBusy):
        return 503, {"detail": str(exc), "dependency": exc.dependency, "retry_after_s": exc.retry_after_s}
    if isinstance(exc, Unauthenticated):
        return 401, {"detail": str(exc)}
    if isinstance(exc, Forbidden):
        return 403, {"detail": str(exc)}
    if isinstance(exc, DependencyUnavailable):
        return 503, {"detail": str(exc), "dependency": exc.dependency}
    if isinstance(exc, SourceRefused):
        return 422, {"detail": str(exc)}
    if isinstance(exc, ConfigurationError):
        return 500, {"detail": str(exc)}
    return 500, {"detail": "internal error"}


def retry_after_headers(exc: BaseException) -> dict[str, str]:
    """``Retry-After`` for the errors that know when to come back (a rate limit, a full LLM queue)."""
    if isinstance(exc, RateLimited | LLMBusy):
        return {"Retry-After": str(exc.retry_after_s)}
    return {}


def add_error_handlers(app: FastAPI) -> None:
    """Map ragbot's exception hierarchy to HTTP status codes with a clear message (one place)."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RagbotError)
        status, body = _error_body(exc)
        # A full LLM queue is load, not a fault: a warning, so a burst does not flood the error log.
        log = logger.warning if isinstance(exc, LLMBusy) else logger.error if status >= 500 else logger.info
        log("request failed: %s", exc, extra={"status": status, "error_type": type(exc).__name__})
        headers = retry_after_headers(exc) or {}
        if status == 401:
            headers = {**headers, "WWW-Authenticate": 'Bearer realm="ragbot"'}
        return JSONResponse(body, status_code=status, headers=headers or None)

    app.add_exception_handler(RagbotError, handle)


def setup_observability(
    app: FastAPI,
    *,
    service: str,
    checks: Mapping[str, ReadinessCheck] | None = None,
    metrics_dependencies: Sequence[params.Depends] = (),
) -> None:
    """Everything an HTTP service needs: middleware, health routes and error handlers."""
    app.add_middleware(ObservabilityMiddleware, service=service)
    add_health_routes(app, service=service, checks=checks, metrics_dependencies=metrics_dependencies)
    add_error_handlers(app)
